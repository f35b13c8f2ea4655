package version

import (
	"runtime"
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
