package sink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/oncegate/oncegate/internal/sink"
)

func newFileSink(t *testing.T, opts sink.FileOptions) *sink.File {
	t.Helper()
	s, err := sink.NewFile(opts)
	if err != nil {
		t.Fatalf("NewFile(%+v): %v", opts, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// checkDir fails t unless dir holds exactly the files named want, which
// leaves no temporary file behind.
func checkDir(t *testing.T, dir string, want ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir: %v", err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s holds %q; want %q", dir, got, want)
	}
}

func checkFile(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("ReadFile: %v", err)
	}
	if string(got) != want {
		t.Errorf("%s holds %q; want %q", path, got, want)
	}
}

func TestFileDeliver(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out", "effects") // created by NewFile
	s := newFileSink(t, sink.FileOptions{Dir: dir})
	ctx := t.Context()
	e := sink.Effect{Key: key1, Body: []byte(`{"to":"ops","text":"disk full"}`)}
	path := filepath.Join(dir, key1+".json")

	for i, wantDup := range []bool{false, true} {
		res, err := s.Deliver(ctx, e)
		if err != nil {
			t.Fatalf("Deliver #%d: %v", i+1, err)
		}
		if res.Duplicate != wantDup || res.Attempts != 1 {
			t.Errorf("Deliver #%d = %+v; want Duplicate %v, Attempts 1", i+1, res, wantDup)
		}
		var body struct{ Path string }
		if err := json.Unmarshal(res.Body, &body); err != nil || body.Path != path {
			t.Errorf("Result.Body = %s (%v); want the path %s", res.Body, err, path)
		}
	}
	checkDir(t, dir, key1+".json")
	checkFile(t, path, string(e.Body))
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("Stat(%s) = %v, %v; want mode 0644", path, fi.Mode(), err)
	}
	if s.Path(key1) != path {
		t.Errorf("Path(%q) = %q; want %q", key1, s.Path(key1), path)
	}

	// The same key with other content is a conflict and leaves the file.
	other := e
	other.Body = []byte(`{"to":"ops","text":"disk fine"}`)
	_, err := s.Deliver(ctx, other)
	checkClass(t, "Deliver(other content)", err, "permanent")
	if !errors.Is(err, sink.ErrKeyConflict) {
		t.Errorf("Deliver(other content) error %v does not wrap ErrKeyConflict", err)
	}
	checkFile(t, path, string(e.Body))
	checkDir(t, dir, key1+".json")
}

func TestFilePerm(t *testing.T) {
	dir := t.TempDir()
	s := newFileSink(t, sink.FileOptions{Dir: dir, Perm: 0o600})
	if _, err := s.Deliver(t.Context(), sink.Effect{Key: key1, Body: []byte(`{}`)}); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if fi, err := os.Stat(s.Path(key1)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("Stat = %v, %v; want mode 0600", fi.Mode(), err)
	}
}

func TestFileRejects(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "effects")
	s := newFileSink(t, sink.FileOptions{Dir: dir})
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()

	for _, tt := range []struct {
		name string
		ctx  context.Context
		key  string
		want string
	}{
		{"path traversal", nil, "../" + key1[:29], "permanent"},
		{"absolute path", nil, "/etc/passwd", "permanent"},
		{"upper case", nil, "0123456789ABCDEF0123456789ABCDEF", "permanent"},
		{"too short", nil, key1[:31], "permanent"},
		{"too long", nil, key1 + "0", "permanent"},
		{"empty", nil, "", "permanent"},
		{"cancelled", cancelled, key1, "retryable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			_, err := s.Deliver(ctx, sink.Effect{Key: tt.key, Body: []byte(`{}`)})
			checkClass(t, fmt.Sprintf("Deliver(key %q)", tt.key), err, tt.want)
		})
	}
	checkDir(t, dir)
	checkDir(t, root, "effects")
}

func TestFileConcurrent(t *testing.T) {
	const n = 16
	for _, tt := range []struct {
		name     string
		sameBody bool
	}{
		{"same content", true},
		{"different content", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newFileSink(t, sink.FileOptions{Dir: dir})
			var (
				start   = make(chan struct{})
				results [n]sink.Result
				errs    [n]error
				wg      sync.WaitGroup
			)
			for i := range n {
				body := []byte(`{"n":0}`)
				if !tt.sameBody {
					body = fmt.Appendf(nil, `{"n":%d}`, i)
				}
				wg.Go(func() {
					<-start
					results[i], errs[i] = s.Deliver(context.Background(), sink.Effect{Key: key1, Body: body})
				})
			}
			close(start)
			wg.Wait()

			winner, dups, conflicts := -1, 0, 0
			for i := range n {
				switch {
				case errs[i] == nil && !results[i].Duplicate:
					if winner >= 0 {
						t.Errorf("Deliver #%d and #%d both wrote the file", winner, i)
					}
					winner = i
				case errs[i] == nil:
					dups++
				case errors.Is(errs[i], sink.ErrKeyConflict):
					conflicts++
				default:
					t.Errorf("Deliver #%d: %v", i, errs[i])
				}
			}
			if winner < 0 {
				t.Fatal("no Deliver wrote the file")
			}
			wantDups, wantConflicts := n-1, 0
			if !tt.sameBody {
				wantDups, wantConflicts = 0, n-1
			}
			if dups != wantDups || conflicts != wantConflicts {
				t.Errorf("got %d duplicates and %d conflicts; want %d and %d", dups, conflicts, wantDups, wantConflicts)
			}
			checkDir(t, dir, key1+".json")
			want := `{"n":0}`
			if !tt.sameBody {
				want = fmt.Sprintf(`{"n":%d}`, winner)
			}
			checkFile(t, s.Path(key1), want)
		})
	}
}

func TestNewFileOptions(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		opts sink.FileOptions
		want string
	}{
		{"defaults", sink.FileOptions{Dir: t.TempDir()}, "ok"},
		{"no Dir", sink.FileOptions{}, "permanent"},
		{"Dir is a file", sink.FileOptions{Dir: notDir}, "permanent"},
		{"setuid Perm", sink.FileOptions{Dir: t.TempDir(), Perm: 0o644 | fs.ModeSetuid}, "permanent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sink.NewFile(tt.opts)
			checkClass(t, "NewFile", err, tt.want)
		})
	}
}
