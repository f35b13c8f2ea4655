package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// errSkip marks a peer that could not be started: the bench skips it and
// says why; it is not a failure.
var errSkip = errors.New("skipped")

func skipf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errSkip}, args...)...)
}

// proc is a server process the bench started.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan error
	log  string // the file its output goes to
}

// stop ends the process with SIGTERM, then SIGKILL after 10s.
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the last lines of the process's log, for error messages.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return strings.Join(lines, "\n")
}

// start runs cmd with its output in dir/name.log.
func start(dir, name string, cmd *exec.Cmd) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, done: make(chan error, 1), log: logPath}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	return p, nil
}

// waitFor polls ready until it succeeds, the process exits, or 30s pass.
func waitFor(ctx context.Context, p *proc, ready func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case werr := <-p.done:
			p.done <- werr
			return fmt.Errorf("%s exited (%v): %s", p.name, werr, p.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after 30s: %v; log: %s", p.name, err, p.tail())
		}
	}
}

// startRedis starts redis-server from PATH on a unix socket in dir, with
// the append-only file on and appendfsync as given, and no snapshots.
func startRedis(ctx context.Context, dir string) (*proc, string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, "", skipf("redis-server not found (apt-get install redis-server)")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.CommandContext(ctx, bin,
		"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--dir", dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--daemonize", "no", "--logfile", "")
	p, err := start(dir, "redis", cmd)
	if err != nil {
		return nil, "", skipf("starting redis-server: %v", err)
	}
	return p, sock, nil
}

// pgBin finds a PostgreSQL program: on PATH, else in the newest
// /usr/lib/postgresql/*/bin.
func pgBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		p := filepath.Join(dirs[i], name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", skipf("%s not found (apt-get install postgresql)", name)
}

// asPostgresUser returns how to run a PostgreSQL program, which refuses to
// run as root: as the postgres user through runuser when this process is
// root, else as this user. It also returns the uid and gid the data
// directory must belong to (-1 to leave it).
func asPostgresUser() (prefix []string, uid, gid int, err error) {
	if os.Geteuid() != 0 {
		return nil, -1, -1, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, 0, 0, skipf("running as root and there is no postgres user to run PostgreSQL as")
	}
	runuser, err := exec.LookPath("runuser")
	if err != nil {
		return nil, 0, 0, skipf("running as root and runuser is missing")
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return []string{runuser, "-u", "postgres", "--"}, uid, gid, nil
}

// startPostgres initdb's a cluster in dir and starts it listening only on
// a unix socket in dir, with fsync and synchronous_commit on (the
// defaults, set explicitly) and room for maxConns connections. It returns
// the connection string.
func startPostgres(ctx context.Context, dir string, maxConns int) (*proc, string, error) {
	initdb, err := pgBin("initdb")
	if err != nil {
		return nil, "", err
	}
	postgres, err := pgBin("postgres")
	if err != nil {
		return nil, "", err
	}
	prefix, uid, gid, err := asPostgresUser()
	if err != nil {
		return nil, "", err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	if uid >= 0 {
		// The temporary directory above dir is root's and 0700: the
		// postgres user must be able to reach dir.
		for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
			if d == os.TempDir() {
				break
			}
			if err := os.Chmod(d, 0o711); err != nil {
				return nil, "", err
			}
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, "", err
		}
	}
	initCmd := exec.CommandContext(ctx, prefix0(prefix, initdb), append(prefixRest(prefix, initdb),
		"-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale", "C")...)
	if out, err := initCmd.CombinedOutput(); err != nil {
		return nil, "", skipf("initdb: %v: %s", err, lastLines(string(out), 5))
	}
	cmd := exec.CommandContext(ctx, prefix0(prefix, postgres), append(prefixRest(prefix, postgres),
		"-D", data, "-k", dir, "-c", "listen_addresses=",
		"-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on",
		"-c", fmt.Sprintf("max_connections=%d", maxConns+10),
		"-c", "shared_buffers=128MB", "-c", "logging_collector=off")...)
	p, err := start(dir, "postgres", cmd)
	if err != nil {
		return nil, "", skipf("starting postgres: %v", err)
	}
	return p, fmt.Sprintf("host=%s user=postgres dbname=postgres sslmode=disable", dir), nil
}

func prefix0(prefix []string, bin string) string {
	if len(prefix) > 0 {
		return prefix[0]
	}
	return bin
}

func prefixRest(prefix []string, bin string) []string {
	if len(prefix) > 0 {
		return append(append([]string{}, prefix[1:]...), bin)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
