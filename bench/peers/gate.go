package main

import (
	"context"
	"io"
)

func runGate(ctx context.Context, o options, dir string, w io.Writer) error { return nil }
