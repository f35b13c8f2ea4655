package secretfile_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/kubelettest"
	"github.com/oncegate/oncegate/internal/secretfile"
)

// TestReadFileKubeletVolume reads secret files laid out as kubelet lays
// out a secret volume: each key a symbolic link through ..data to the
// current version's directory, owned by root, with the volume's
// defaultMode and, under the pod's fsGroup, that group and its read bit.
// As the pod's user (runAsUser 10001, fsGroup 10001) ReadFile accepts
// defaultMode 0400 and 0440 (both 0440 under fsGroup), and refuses
// kubelet's default 0644 and a group-writable 0660, naming the fix.
func TestReadFileKubeletVolume(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	vol := func(t *testing.T, mode os.FileMode, fsGroup int) string {
		dir := t.TempDir()
		asKubelet, err := kubelettest.Volume(dir, []kubelettest.File{{Path: "key", Content: key}}, mode, fsGroup)
		if err != nil {
			t.Fatal(err)
		}
		if !asKubelet {
			t.Skip("laying files out as kubelet does (root's files, the pod's group) needs root")
		}
		return filepath.Join(dir, "key")
	}
	// The pod's user reads the volume.
	defer secretfile.SetEUID(10001)()
	for _, tt := range []struct {
		name    string
		mode    os.FileMode
		fsGroup int
		fix     string // empty: accepted
	}{
		{"defaultMode 0400 under fsGroup", 0o400, 10001, ""},
		{"defaultMode 0440 under fsGroup", 0o440, 10001, ""},
		{"defaultMode 0400 without fsGroup", 0o400, -1, ""},
		{"kubelet's default 0644", 0o644, 10001, "defaultMode: 0440"},
		{"defaultMode 0444", 0o444, -1, "defaultMode: 0440"},
		{"defaultMode 0660 under fsGroup", 0o660, 10001, "chmod 600"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := vol(t, tt.mode, tt.fsGroup)
			got, err := secretfile.ReadFile(path)
			if tt.fix == "" {
				if err != nil || !bytes.Equal(got, key) {
					t.Fatalf("ReadFile(%s) = %q, %v; want the key", path, got, err)
				}
				return
			}
			if !errors.Is(err, secretfile.ErrMode) || !strings.Contains(err.Error(), tt.fix) || got != nil {
				t.Errorf("ReadFile(%s) = %q, %v; want ErrMode saying %q", path, got, err, tt.fix)
			}
		})
	}
}

// TestReadFileFollowsLinks: a secret file reached through symbolic links
// (kubelet's ..data layout) is checked and read as the file it links to,
// whatever the links' own modes, by the process's own user too.
func TestReadFileFollowsLinks(t *testing.T) {
	dir := t.TempDir()
	if _, err := kubelettest.Volume(dir, []kubelettest.File{{Path: "tokens", Content: []byte("alice " + tokA + "\n")}}, 0o400, -1); err != nil {
		t.Fatal(err)
	}
	s, err := secretfile.Load(filepath.Join(dir, "tokens"), secretfile.Options{})
	if err != nil {
		t.Fatalf("Load through ..data = %v", err)
	}
	if name, ok := s.Lookup(tokA); !ok || name != "alice" {
		t.Errorf("Lookup = %q, %v; want alice", name, ok)
	}
	if _, err := secretfile.ReadFile(dir); !errors.Is(err, secretfile.ErrFormat) {
		t.Errorf("ReadFile(a directory) = %v; want ErrFormat", err)
	}
}
