// Package tools pins the tools CI builds from the Go module proxy, apart
// from Oncegate's own module so that their dependencies do not become
// Oncegate's: golangci-lint, at the version go.mod names.
//
//	go build -C tools -o /usr/local/bin/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint
//	golangci-lint run ./...
package tools
