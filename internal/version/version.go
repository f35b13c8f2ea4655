// Package version reports which build of Oncegate is running, from the
// build information the Go toolchain embeds in every binary.
package version

import (
	"runtime"
	"runtime/debug"
)

// Info describes the running build.
type Info struct {
	// Version is the module version ("v0.3.0"), or "(devel)" for a build
	// from a work tree.
	Version string
	// Commit is the VCS revision the binary was built from, with
	// "-modified" appended when the work tree had uncommitted changes;
	// "unknown" when the build did not record one (go run, go test).
	Commit string
	// Go is the Go toolchain version.
	Go string
}

// Get returns the running build's Info.
func Get() Info {
	i := Info{Version: "(devel)", Commit: "unknown", Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	if v := bi.Main.Version; v != "" {
		i.Version = v
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Commit = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && i.Commit != "unknown" {
		i.Commit += "-modified"
	}
	return i
}

// String is the one-line form: "oncegate v0.3.0 (commit 1a2b3c…, go1.26.8)".
func (i Info) String() string {
	return "oncegate " + i.Version + " (commit " + i.Commit + ", " + i.Go + ")"
}
