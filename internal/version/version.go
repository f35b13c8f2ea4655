// Package version reports which build of Oncegate is running, from the
// build information the Go toolchain embeds in every binary, or, where
// that has none, from values set at link time.
//
// # Link-time values
//
// A binary built without VCS stamping (a container build whose context
// leaves out .git, -buildvcs=false, a source archive) has no commit in its
// build information, and a build from a work tree has no module version.
// The link-time variables fill those in:
//
//	go build -ldflags "-X github.com/oncegate/oncegate/internal/version.version=v0.3.0 \
//	  -X github.com/oncegate/oncegate/internal/version.commit=$(git rev-parse HEAD)" ./cmd/consumer
//
// The build information wins where it has a value: a binary installed with
// go install …@v0.3.0 reports v0.3.0 whatever was linked in.
package version

import (
	"runtime"
	"runtime/debug"
)

// version and commit are set with -ldflags -X (see the package doc); empty
// when not.
var (
	version string
	commit  string
)

// Info describes the running build.
type Info struct {
	// Version is the module version ("v0.3.0"), or "(devel)" for a build
	// from a work tree that set none at link time.
	Version string
	// Commit is the VCS revision the binary was built from, with
	// "-modified" appended when the work tree had uncommitted changes;
	// "unknown" when neither the build information nor the link-time
	// value has one (go run, go test).
	Commit string
	// Go is the Go toolchain version.
	Go string
}

// Get returns the running build's Info.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return get(bi, version, commit)
}

// get builds the Info from the build information bi (nil when the binary
// has none) and the link-time values.
func get(bi *debug.BuildInfo, linkVersion, linkCommit string) Info {
	i := Info{Version: "(devel)", Commit: "unknown", Go: runtime.Version()}
	if linkVersion != "" {
		i.Version = linkVersion
	}
	if linkCommit != "" {
		i.Commit = linkCommit
	}
	if bi == nil {
		return i
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		i.Version = v
	}
	revision, modified := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision != "" {
		i.Commit = revision
		if modified {
			i.Commit += "-modified"
		}
	}
	return i
}

// String is the one-line form: "oncegate v0.3.0 (commit 1a2b3c…, go1.26.8)".
func (i Info) String() string {
	return "oncegate " + i.Version + " (commit " + i.Commit + ", " + i.Go + ")"
}
