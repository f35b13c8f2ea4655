package main

import (
	"flag"
)

// parseArgs parses args into fs with flags and positional arguments in
// any order ("dead show 12 -json" as "dead show -json 12"), and returns the
// positional ones. "--" ends the flags. A flag that does not parse is a
// usage error, and -h is help.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs stopped at a positional argument, or after "--".
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
