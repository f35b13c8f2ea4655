package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/oncegate/oncegate/internal/config"
)

// Docker does not run where these tests run, so they check
// docker-compose.yml, the Dockerfile and the files they mount against the
// code instead: the consumer's command parses with the real flags and its
// configuration loads, and the addresses the services use to reach each
// other agree.

// repoRoot is the repository root, seen from cmd/consumer.
var repoRoot = filepath.Join("..", "..")

// composeFile is the part of docker-compose.yml the tests read. It expects
// the list forms of command, ports, volumes and healthcheck.test and the
// map form of environment.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"` // "." or {context, dockerfile}
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   any               `yaml:"depends_on"` // a list, or a map of conditions
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Restart string `yaml:"restart"`
}

// mount is one short-syntax volume entry, source:target[:mode].
type mount struct {
	source, target, mode string
}

// bind reports whether the source is a host path rather than a named volume.
func (m mount) bind() bool {
	return strings.HasPrefix(m.source, ".") || strings.HasPrefix(m.source, "/") || strings.HasPrefix(m.source, "~")
}

func loadCompose(t *testing.T) *composeFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return &f
}

func (f *composeFile) service(t *testing.T, name string) composeService {
	t.Helper()
	s, ok := f.Services[name]
	if !ok {
		t.Fatalf("docker-compose.yml: no service %q", name)
	}
	return s
}

func (s composeService) mounts(t *testing.T) []mount {
	t.Helper()
	var ms []mount
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 {
			t.Fatalf("volume %q: want source:target[:mode]", v)
		}
		m := mount{source: parts[0], target: parts[1]}
		if len(parts) == 3 {
			m.mode = parts[2]
		}
		ms = append(ms, m)
	}
	return ms
}

// mountFor returns the mount whose target is path or a directory holding it.
func (s composeService) mountFor(t *testing.T, path string) (mount, bool) {
	t.Helper()
	var best mount
	found := false
	for _, m := range s.mounts(t) {
		if path == m.target || strings.HasPrefix(path, strings.TrimSuffix(m.target, "/")+"/") {
			if !found || len(m.target) > len(best.target) {
				best, found = m, true
			}
		}
	}
	return best, found
}

// hostPath maps a path inside the container to the repository file a bind
// mount puts there.
func (s composeService) hostPath(t *testing.T, path string) string {
	t.Helper()
	m, ok := s.mountFor(t, path)
	if !ok || !m.bind() {
		t.Fatalf("%s: no bind mount provides it", path)
	}
	if m.mode != "ro" {
		t.Errorf("bind mount %s:%s: want it read-only (:ro)", m.source, m.target)
	}
	rel := strings.TrimPrefix(path, m.target)
	p := filepath.Join(repoRoot, filepath.FromSlash(m.source+rel))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("bind mount source for %s: %v", path, err)
	}
	return p
}

// onNamedVolume checks that a path in the container lies on a named volume
// declared at the top level, so its data outlives the container.
func (f *composeFile) onNamedVolume(t *testing.T, s composeService, what, path string) {
	t.Helper()
	m, ok := s.mountFor(t, path)
	if !ok || m.bind() {
		t.Errorf("%s %s: not on a named volume (mounts %v)", what, path, s.Volumes)
		return
	}
	if _, ok := f.Volumes[m.source]; !ok {
		t.Errorf("%s: volume %q is not declared under the top-level volumes", what, m.source)
	}
}

// publishes reports whether the service publishes the container port.
func (s composeService) publishes(port int) bool {
	for _, p := range s.Ports {
		if strings.HasSuffix(p, ":"+strconv.Itoa(port)) {
			return true
		}
	}
	return false
}

// interpolate expands ${VAR}, ${VAR:-default}, ${VAR-default} and $$ as
// Compose does, with every variable unset on the host: the values the
// container sees on a machine that sets none of them.
func interpolate(t *testing.T, s string) string {
	t.Helper()
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		s = s[i+1:]
		switch {
		case strings.HasPrefix(s, "$"):
			b.WriteByte('$')
			s = s[1:]
		case strings.HasPrefix(s, "{"):
			end := strings.IndexByte(s, '}')
			if end < 0 {
				t.Fatalf("unterminated ${ in %q", s)
			}
			expr := s[1:end]
			s = s[end+1:]
			if _, def, ok := strings.Cut(expr, ":-"); ok {
				b.WriteString(def)
			} else if _, def, ok := strings.Cut(expr, "-"); ok {
				b.WriteString(def)
			}
		default:
			// $VAR: unset, so empty.
			n := strings.IndexFunc(s, func(r rune) bool {
				return !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
			})
			if n < 0 {
				n = len(s)
			}
			s = s[n:]
		}
	}
}

// containerEnv replaces the ONCEGATE_* variables of the test's environment
// with the ones the compose file gives the container, so that config.Load
// sees what the consumer would see.
func containerEnv(t *testing.T, s composeService) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, config.EnvPrefix) {
			t.Setenv(k, v) // restores it at the end of the test
			os.Unsetenv(k)
		}
	}
	for k, v := range s.Environment {
		t.Setenv(k, interpolate(t, v))
	}
}

func hostPort(t *testing.T, what, addr string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s %q: port: %v", what, addr, err)
	}
	return h, n
}

func TestComposeServices(t *testing.T) {
	f := loadCompose(t)
	for _, name := range []string{"nats", "consumer", "prometheus"} {
		t.Run(name, func(t *testing.T) {
			s := f.service(t, name)
			if s.Image == "" && s.Build == nil {
				t.Errorf("no image and no build")
			}
			if len(s.Ports) == 0 {
				t.Errorf("publishes no ports")
			}
			// Nothing here authenticates: publish on loopback only.
			for _, p := range s.Ports {
				if !strings.HasPrefix(p, "127.0.0.1:") {
					t.Errorf("port %q: want it bound to 127.0.0.1 (127.0.0.1:HOST:CONTAINER)", p)
				}
			}
			if s.Restart == "" {
				t.Errorf("no restart policy")
			}
		})
	}
}

// natsConf loads the NATS server configuration the nats service runs with,
// using the server's own parser.
func natsConf(t *testing.T, s composeService) *server.Options {
	t.Helper()
	i := slices.IndexFunc(s.Command, func(a string) bool { return a == "-c" || a == "--config" })
	if i < 0 || i+1 >= len(s.Command) {
		t.Fatalf("nats command %q: no -c FILE", s.Command)
	}
	path := s.hostPath(t, s.Command[i+1])
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return opts
}

func TestComposeNATS(t *testing.T) {
	f := loadCompose(t)
	s := f.service(t, "nats")
	opts := natsConf(t, s)

	if !opts.JetStream {
		t.Fatalf("nats.conf: JetStream is off; the consumer needs it")
	}
	if opts.StoreDir == "" {
		t.Errorf("nats.conf: jetstream has no store_dir")
	} else {
		f.onNamedVolume(t, s, "jetstream store_dir", opts.StoreDir)
	}
	// The server's default flushes every two minutes.
	if !opts.SyncAlways && (opts.SyncInterval <= 0 || opts.SyncInterval >= 2*time.Minute) {
		t.Errorf("nats.conf: jetstream sync_interval is %v; set it (e.g. 100ms or always) for durability", opts.SyncInterval)
	}
	for _, port := range []int{opts.Port, opts.HTTPPort} {
		if !s.publishes(port) {
			t.Errorf("nats.conf listens on %d, which the service does not publish (ports %q)", port, s.Ports)
		}
	}
	if s.Healthcheck == nil {
		t.Fatalf("no healthcheck; the consumer waits for nats to be healthy")
	}
	test := strings.Join(s.Healthcheck.Test, " ")
	want := ":" + strconv.Itoa(opts.HTTPPort) + "/healthz?js-enabled-only=true"
	if !strings.Contains(test, want) {
		t.Errorf("healthcheck %q: want it to query %s", test, want)
	}
}

func TestComposeConsumer(t *testing.T) {
	f := loadCompose(t)
	s := f.service(t, "consumer")
	if len(s.Command) == 0 {
		t.Fatalf("consumer: no command")
	}

	// The first word is a subcommand the binary dispatches: "run -h" answers
	// with its usage, an unknown word with an error.
	sub, args := s.Command[0], s.Command[1:]
	if sub != "run" {
		t.Errorf("consumer command %q: want the run subcommand", sub)
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{sub, "-h"}, strings.NewReader(""), &stdout, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("consumer %s -h: %v; want it to print usage (is %q a subcommand?)", sub, err, sub)
	}

	// The flags, parsed by the flag set runRun builds.
	fs := flag.NewFlagSet(sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c common
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("consumer %s %q: %v", sub, args, err)
	}
	if fs.NArg() > 0 {
		t.Fatalf("consumer %s: unexpected argument %q", sub, fs.Arg(0))
	}
	if c.file == "" {
		t.Fatalf("consumer command: no -config; the compose file is meant to run a mounted file")
	}

	// The configuration file, as mounted, with the flags and the service's
	// environment applied, validates.
	c.file = s.hostPath(t, c.file)
	containerEnv(t, s)
	cfg, err := c.load()
	if err != nil {
		t.Fatalf("consumer configuration (%s with %q): %v", c.file, args, err)
	}

	// The data directory outlives the container.
	if !filepath.IsAbs(cfg.DataDir) {
		t.Errorf("data_dir %q: want an absolute path in the container (-data)", cfg.DataDir)
	} else {
		f.onNamedVolume(t, s, "data_dir", cfg.DataDir)
	}

	// NATS: the nats service, on the port its configuration listens on,
	// once it is healthy.
	if cfg.NATS.URL == "" {
		t.Fatalf("consumer: no NATS URL; it would start an embedded server instead of using the nats service")
	}
	u, err := url.Parse(cfg.NATS.URL)
	if err != nil {
		t.Fatalf("nats url %q: %v", cfg.NATS.URL, err)
	}
	if _, ok := f.Services[u.Hostname()]; !ok || u.Hostname() != "nats" {
		t.Errorf("nats url %q: want the host to be the nats service", cfg.NATS.URL)
	}
	if opts := natsConf(t, f.service(t, "nats")); u.Port() != strconv.Itoa(opts.Port) {
		t.Errorf("nats url %q: the nats service listens on %d", cfg.NATS.URL, opts.Port)
	}
	deps, _ := s.DependsOn.(map[string]any)
	if dep, _ := deps["nats"].(map[string]any); dep["condition"] != "service_healthy" {
		t.Errorf("depends_on %v: want nats with condition service_healthy", s.DependsOn)
	}

	// Metrics: reachable from outside the container, published, and
	// what the healthcheck asks.
	host, port := hostPort(t, "metrics.listen", cfg.Metrics.Listen)
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		t.Errorf("metrics.listen %q: loopback in a container is unreachable from Prometheus and the published port", cfg.Metrics.Listen)
	}
	if !s.publishes(port) {
		t.Errorf("metrics port %d is not published (ports %q)", port, s.Ports)
	}
	if s.Healthcheck != nil {
		test := strings.Join(s.Healthcheck.Test, " ")
		if want := ":" + strconv.Itoa(port) + "/readyz"; !strings.Contains(test, want) {
			t.Errorf("healthcheck %q: want it to query %s", test, want)
		}
	}

	// The LLM key reaches the container under the name the file gives.
	if env := cfg.LLM.APIKeyEnv; env != "" {
		if _, ok := s.Environment[env]; !ok {
			t.Errorf("llm.api_key_env is %s, which the service's environment does not pass through", env)
		}
	}
}

func TestComposeDockerfile(t *testing.T) {
	f := loadCompose(t)
	s := f.service(t, "consumer")
	ctx, dockerfile := ".", "Dockerfile"
	switch b := s.Build.(type) {
	case string:
		ctx = b
	case map[string]any:
		if v, ok := b["context"].(string); ok {
			ctx = v
		}
		if v, ok := b["dockerfile"].(string); ok {
			dockerfile = v
		}
	default:
		t.Fatalf("consumer: build is %v; want it built from the repository", s.Build)
	}
	if filepath.Clean(ctx) != "." {
		t.Errorf("build context %q: want the repository root", ctx)
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, ctx, dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	for _, want := range []string{"CGO_ENABLED=0", "go build", "-trimpath", "./cmd/consumer", "ENTRYPOINT"} {
		if !strings.Contains(df, want) {
			t.Errorf("%s: no %q", dockerfile, want)
		}
	}

	// The healthcheck's tool must be in the runtime image: distroless and
	// scratch have no shell and no wget.
	var last string
	for line := range strings.Lines(df) {
		if fields := strings.Fields(line); len(fields) >= 2 && strings.EqualFold(fields[0], "FROM") {
			last = fields[1]
		}
	}
	if s.Healthcheck != nil && slices.Contains(s.Healthcheck.Test, "wget") &&
		(strings.Contains(last, "distroless") || last == "scratch") {
		t.Errorf("the runtime image %s has no wget for the healthcheck", last)
	}

	ignore, err := os.ReadFile(filepath.Join(repoRoot, ctx, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(string(ignore)), ".git") {
		t.Errorf(".dockerignore: .git is not excluded")
	}
}

// prometheusConf is the part of prometheus.yml the tests read.
type prometheusConf struct {
	Global struct {
		ScrapeInterval string `yaml:"scrape_interval"`
	} `yaml:"global"`
	ScrapeConfigs []struct {
		JobName        string `yaml:"job_name"`
		ScrapeInterval string `yaml:"scrape_interval"`
		MetricsPath    string `yaml:"metrics_path"`
		StaticConfigs  []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func TestComposePrometheus(t *testing.T) {
	f := loadCompose(t)
	s := f.service(t, "prometheus")
	path := s.hostPath(t, "/etc/prometheus/prometheus.yml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pc prometheusConf
	if err := yaml.Unmarshal(data, &pc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}

	// The consumer's metrics port, from its command.
	consumer := f.service(t, "consumer")
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c common
	c.register(fs)
	if len(consumer.Command) == 0 || fs.Parse(consumer.Command[1:]) != nil || c.metrics == "" {
		t.Fatalf("consumer command %q: no -metrics address", consumer.Command)
	}
	_, port := hostPort(t, "-metrics", c.metrics)
	want := net.JoinHostPort("consumer", strconv.Itoa(port))

	found := false
	for _, sc := range pc.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			if !slices.Contains(st.Targets, want) {
				continue
			}
			found = true
			if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
				t.Errorf("job %s: metrics_path %q; the consumer serves /metrics", sc.JobName, sc.MetricsPath)
			}
			interval := cmp.Or(sc.ScrapeInterval, pc.Global.ScrapeInterval, "1m")
			if interval != "15s" {
				t.Errorf("job %s: scrape interval %s; want 15s", sc.JobName, interval)
			}
		}
	}
	if !found {
		t.Errorf("%s: no job scrapes %s", path, want)
	}
}
