package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/oncegate/oncegate/internal/app"
)

func runInspect(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	_ = app.Options{}
	return fmt.Errorf("inspect: %w", flag.ErrHelp)
}
