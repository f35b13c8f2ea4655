package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// windowReadsCounter reports whether a window of the given TTL with its
// default clock reads the CPU's time-stamp counter in this program, by the
// rule window.Options.Now documents: on Linux on amd64 whose kernel keeps
// time with the counter (the tsc clocksource), for a time unit (TTL/32,
// rounded down to a power of two nanoseconds) of about 1ms or more, unless
// the program was built with -tags oncegate_nocounter or purego.
func windowReadsCounter(ttl time.Duration) bool {
	if noCounterBuild || runtime.GOOS != "linux" || runtime.GOARCH != "amd64" || ttl/32 < 1<<20 {
		return false
	}
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && strings.TrimSpace(string(b)) == "tsc"
}

// noCounterHow says how to run this bench with the window on time.Since.
const noCounterHow = "go run -C bench -tags oncegate_nocounter ./window"

// buildNoCounter builds this bench with -tags oncegate_nocounter into dir
// and returns the binary's path: the same program with every window on the
// monotonic clock.
func buildNoCounter(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "window-nocounter")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "oncegate_nocounter", "-o", bin, "github.com/oncegate/oncegate/bench/window")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -tags oncegate_nocounter (run it in the repository's bench module): %w\n%s", err, out)
	}
	return bin, nil
}
