// Package kubelettest lays files out as kubelet lays out a Kubernetes
// secret (or configMap) volume, for tests of the code that reads them:
//
//	dir/..2026_12_03_20_54_17.000000001/KEY   the files of the current version
//	dir/..data -> ..2026_12_03_20_54_17.000000001
//	dir/KEY -> ..data/KEY                     one link per top-level name
//
// Each file gets the volume's defaultMode (or its item's mode); with an
// fsGroup, kubelet then gives every file and directory that group and the
// group's read bit (a secret volume is read-only: mode | 0440; directories
// get setgid and the group's search bit too). kubelet owns the files: they
// are root's. A process that is not root cannot give files to root or to
// another group, so Volume says whether it could lay them out as kubelet
// does.
package kubelettest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// version is the name of the directory of the current version, as kubelet
// names one (..<timestamp>).
const version = "..2026_12_03_20_54_17.000000001"

// File is one file of a volume: its path below the volume (an item's path,
// or the key) and its content; Mode, if not zero, is the item's mode, else
// the volume's defaultMode applies.
type File struct {
	Path    string
	Content []byte
	Mode    fs.FileMode
}

// Volume lays files out in dir as kubelet lays out a secret volume with
// defaultMode and, if fsGroup is not negative, the pod's fsGroup. It
// returns whether the files are owned as kubelet owns them (root, and the
// fsGroup's group): only a process running as root can do that, and
// others get files of their own with the same modes.
func Volume(dir string, files []File, defaultMode fs.FileMode, fsGroup int) (asKubelet bool, err error) {
	root := os.Geteuid() == 0
	ver := filepath.Join(dir, version)
	if err := os.MkdirAll(ver, 0o755); err != nil {
		return false, err
	}
	top := map[string]bool{}
	for _, f := range files {
		if f.Path == "" || filepath.IsAbs(f.Path) || strings.HasPrefix(f.Path, "..") {
			return false, fmt.Errorf("kubelettest: bad path %q", f.Path)
		}
		p := filepath.Join(ver, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return false, err
		}
		mode := defaultMode
		if f.Mode != 0 {
			mode = f.Mode
		}
		if err := os.WriteFile(p, f.Content, 0o600); err != nil {
			return false, err
		}
		if err := os.Chmod(p, mode); err != nil {
			return false, err
		}
		top[strings.SplitN(filepath.ToSlash(f.Path), "/", 2)[0]] = true
	}
	if fsGroup >= 0 {
		// pkg/volume's SetVolumeOwnership on a read-only volume.
		err := filepath.WalkDir(ver, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if root {
				if err := os.Lchown(p, -1, fsGroup); err != nil {
					return err
				}
			}
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			mask := fs.FileMode(0o440)
			if d.IsDir() {
				mask |= fs.ModeSetgid | 0o110
			}
			return os.Chmod(p, fi.Mode()|mask)
		})
		if err != nil {
			return false, err
		}
	}
	if err := os.Symlink(version, filepath.Join(dir, "..data")); err != nil {
		return false, err
	}
	for name := range top {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			return false, err
		}
	}
	return root, nil
}
