package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// FileOptions configures a [File] sink. The zero value is not valid: Dir
// is required.
type FileOptions struct {
	// Dir is the directory the files are written to. It is created, with
	// permissions 0o755, if missing. It must be on a file system with hard
	// links (any local POSIX one). Required.
	Dir string

	// Perm is the permission bits of each file, set exactly (the umask does
	// not apply). The default is 0o644.
	Perm fs.FileMode
}

// File writes each effect to its own file, Dir/<key>.json, so that a key
// names at most one file and a repeat finds it there.
type File struct {
	dir  string
	perm fs.FileMode
}

// NewFile returns a file sink, creating opts.Dir if needed. It fails with
// an error matching [ErrPermanent] if the options are invalid or the
// directory cannot be created.
func NewFile(opts FileOptions) (*File, error) {
	if opts.Dir == "" {
		return nil, optionsError("file", "empty Dir")
	}
	if opts.Perm&^fs.ModePerm != 0 {
		return nil, optionsError("file", "Perm %v has bits other than permissions", opts.Perm)
	}
	if opts.Perm == 0 {
		opts.Perm = 0o644
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, optionsError("file", "Dir: %v", err)
	}
	return &File{dir: opts.Dir, perm: opts.Perm}, nil
}

// Path returns the name of the file for key.
func (s *File) Path(key string) string { return filepath.Join(s.dir, key+".json") }

// Deliver writes e.Body, as it is, to Path(e.Key); the pipeline, step and
// headers are not written. The file appears whole or not at all: the body
// goes to a hidden temporary file ".<key>.*.tmp" in Dir, which is synced,
// then hard-linked to the final name, which fails if that name exists, and
// the directory is synced. A crash may leave a temporary file behind;
// readers take only "*.json".
//
// If the file already exists with the same content, the result is a
// success with Result.Duplicate set; with other content, the error wraps
// [ErrKeyConflict] and is permanent. Of concurrent calls for one key,
// exactly one writes the file. Result.Body is {"path":"<the file>"}. An
// I/O error is retryable. ctx is checked once, before anything is
// written.
func (s *File) Deliver(ctx context.Context, e Effect) (Result, error) {
	if err := checkKey("file", e.Key); err != nil {
		return Result{}, err
	}
	fail := func(retryable bool, err error) (Result, error) {
		return Result{Attempts: 1}, &Error{Sink: "file", Key: e.Key, Retryable: retryable, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return fail(true, err)
	}
	path := s.Path(e.Key)
	dup, err := s.existing(path, e.Body)
	if err == nil && !dup {
		var tmp string
		if tmp, err = s.writeTemp(e.Key, e.Body); err == nil {
			err = os.Link(tmp, path)
			os.Remove(tmp) // harmless if left: readers skip it
			if errors.Is(err, fs.ErrExist) {
				dup, err = s.existing(path, e.Body)
			}
		}
	}
	if err != nil {
		return fail(!errors.Is(err, ErrKeyConflict), err)
	}
	// Sync the directory even for a duplicate: its writer may not have yet.
	if err := syncDir(s.dir); err != nil {
		return fail(true, err)
	}
	body, err := json.Marshal(struct {
		Path string `json:"path"`
	}{path})
	if err != nil { // a string always marshals
		return fail(false, err)
	}
	return Result{Duplicate: dup, Body: body, Attempts: 1}, nil
}

// Close does nothing: the sink owns no resource.
func (s *File) Close() error { return nil }

// existing reports whether path exists with the content body. It returns
// false and no error if there is no such file, and an error wrapping
// ErrKeyConflict if the file holds something else.
func (s *File) existing(path string, body []byte) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if fi.Mode().IsRegular() && fi.Size() == int64(len(body)) {
		got := make([]byte, len(body))
		if _, err := io.ReadFull(f, got); err != nil {
			return false, err
		}
		if bytes.Equal(got, body) {
			return true, nil
		}
	}
	return false, fmt.Errorf("%w: %s holds other content", ErrKeyConflict, filepath.Base(path))
}

// writeTemp writes body to a new temporary file in the directory, with the
// sink's permissions, syncs and closes it, and returns its name.
func (s *File) writeTemp(key string, body []byte) (name string, err error) {
	f, err := os.CreateTemp(s.dir, "."+key+".*.tmp")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	_, err = f.Write(body)
	if err == nil {
		err = f.Chmod(s.perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return f.Name(), err
}

// syncDir makes the directory's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
