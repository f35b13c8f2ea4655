// Command printversion prints version.Get(), for version_test.go to build
// with the Dockerfile's link-time flags.
package main

import (
	"fmt"

	"github.com/oncegate/oncegate/internal/version"
)

func main() { fmt.Println(version.Get()) }
