package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	i := Get()
	if i.Go != runtime.Version() || i.Version == "" || i.Commit == "" {
		t.Errorf("Get() = %+v", i)
	}
	if s := i.String(); !strings.HasPrefix(s, "oncegate ") || !strings.Contains(s, i.Go) {
		t.Errorf("String() = %q", s)
	}
}

func TestGetFallback(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	tests := []struct {
		name                    string
		bi                      *debug.BuildInfo
		linkVersion, linkCommit string
		wantVersion, wantCommit string
	}{
		{"nothing", nil, "", "", "(devel)", "unknown"},
		{"no build info, link-time values", nil, "v1.2.3", "abc", "v1.2.3", "abc"},
		{"a work tree without VCS stamping", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "", "", "(devel)", "unknown"},
		{"a work tree without VCS stamping, link-time values", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			"v1.2.3", "abc", "v1.2.3", "abc"},
		{"go install @version wins", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v9.9.9", "abc",
			"v0.3.0", "abc"},
		{"VCS stamping wins", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("def", "false")},
			"v1.2.3", "abc", "v1.2.3", "def"},
		{"a modified work tree", &debug.BuildInfo{Settings: vcs("def", "true")}, "", "", "(devel)", "def-modified"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := get(tt.bi, tt.linkVersion, tt.linkCommit)
			if i.Version != tt.wantVersion || i.Commit != tt.wantCommit {
				t.Errorf("get(%+v, %q, %q) = %s, %s; want %s, %s", tt.bi, tt.linkVersion, tt.linkCommit,
					i.Version, i.Commit, tt.wantVersion, tt.wantCommit)
			}
		})
	}
}

// linkFlag matches one -X of this package's variables.
var linkFlag = regexp.MustCompile(`-X[ =]github\.com/oncegate/oncegate/internal/version\.(\w+)=`)

// TestLinkFlags builds a program with the -X flags that the Dockerfile and
// the README's go build line set, without VCS stamping as in a container,
// and checks that it reports the values linked in: a renamed variable, or
// a misspelt flag, would leave "(devel) (commit unknown)".
func TestLinkFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	for _, file := range []string{"../../Dockerfile", "../../README.md"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		vars := map[string]bool{}
		for _, m := range linkFlag.FindAllStringSubmatch(string(data), -1) {
			vars[m[1]] = true
		}
		if !vars["version"] || !vars["commit"] || len(vars) != 2 {
			t.Errorf("%s sets %v with -X; want version and commit", file, vars)
		}
	}
	bin := filepath.Join(t.TempDir(), "printversion")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin,
		"-ldflags", "-X github.com/oncegate/oncegate/internal/version.version=v7.8.9 "+
			"-X github.com/oncegate/oncegate/internal/version.commit=0123abcd",
		"./testdata/printversion")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "oncegate v7.8.9 (commit 0123abcd, " + runtime.Version() + ")"
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("printversion = %q; want %q", got, want)
	}
}
