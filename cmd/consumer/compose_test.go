package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
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
	Secrets  map[string]any            `yaml:"secrets"`
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
	Restart string   `yaml:"restart"`
	Secrets []string `yaml:"secrets"` // the short syntax: a top-level secret's name, mounted at /run/secrets/NAME
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
	var c runFlags
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
	var c runFlags
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

// consumerFlags parses the consumer service's command with the run
// command's flags.
func consumerFlags(t *testing.T, s composeService) *runFlags {
	t.Helper()
	if len(s.Command) == 0 || s.Command[0] != "run" {
		t.Fatalf("consumer command %q: want the run subcommand", s.Command)
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c runFlags
	c.register(fs)
	if err := fs.Parse(s.Command[1:]); err != nil {
		t.Fatalf("consumer command %q: %v", s.Command, err)
	}
	return &c
}

// hostVariable matches a value Compose takes from the host's environment:
// ${VAR}, ${VAR:-} or ${VAR-}, with no default a secret could hide in.
var hostVariable = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)(:?-)?\}$`)

// TestComposeIngress: the consumer serves the webhook ingress on every
// interface of its container, the port is published (on loopback), and
// every source that authenticates gets its secret from the host's
// environment or a mounted file, never from a value written in the file.
func TestComposeIngress(t *testing.T) {
	f := loadCompose(t)
	s := f.service(t, "consumer")
	c := consumerFlags(t, s)
	if c.ingress == "" {
		t.Fatalf("consumer command %q: no -ingress; webhooks could not reach the stack", s.Command)
	}
	host, port := hostPort(t, "-ingress", c.ingress)
	if host != "0.0.0.0" {
		t.Errorf("-ingress %s: want 0.0.0.0:PORT; another host is out of reach of the published port", c.ingress)
	}
	want := fmt.Sprintf("127.0.0.1:%d:%d", port, port)
	if !slices.Contains(s.Ports, want) {
		t.Errorf("ports %q: want %q, the ingress published on loopback", s.Ports, want)
	}

	c.file = s.hostPath(t, c.file)
	containerEnv(t, s)
	cfg, err := c.load()
	if err != nil {
		t.Fatalf("consumer configuration with the ingress: %v", err)
	}
	if cfg.Ingress.Listen != c.ingress || len(cfg.Ingress.Sources) == 0 {
		t.Fatalf("ingress listen %q, %d sources; want %s and the file's sources", cfg.Ingress.Listen, len(cfg.Ingress.Sources), c.ingress)
	}
	secrets := 0
	for _, src := range cfg.Ingress.Sources {
		for _, ref := range []struct{ env, file string }{{src.SecretEnv, src.SecretFile}, {src.PreviousSecretEnv, src.PreviousSecretFile}} {
			switch {
			case ref.env != "":
				v, ok := s.Environment[ref.env]
				if !ok {
					if ref.env == src.SecretEnv {
						t.Errorf("source %s: its secret_env %s is not in the service's environment", src.Name, ref.env)
					}
					continue
				}
				m := hostVariable.FindStringSubmatch(v)
				if m == nil {
					t.Errorf("source %s: %s=%q; want it from the host (${%s:-}), not written in the file", src.Name, ref.env, v, ref.env)
					continue
				}
				secrets++
			case ref.file != "":
				name, ok := strings.CutPrefix(ref.file, "/run/secrets/")
				switch {
				case ok && slices.Contains(s.Secrets, name):
					if _, declared := f.Secrets[name]; !declared {
						t.Errorf("source %s: secret %q is not declared under the top-level secrets", src.Name, name)
					}
				case ok:
					t.Errorf("source %s: secret_file %s, but the service does not mount the secret %q", src.Name, ref.file, name)
				default:
					s.hostPath(t, ref.file) // a read-only bind mount of a file that exists
				}
				secrets++
			}
		}
	}
	if secrets == 0 {
		t.Errorf("no ingress source gets a secret from the service")
	}
}

// exactTag matches an image pinned to an exact version, with an optional
// digest: nats:2.15.2-alpine, prom/prometheus:v3.5.0,
// golang:1.26.8@sha256:….
var exactTag = regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]*:v?\d+\.\d+\.\d+(?:-[a-z0-9.]+)?(?:@sha256:[0-9a-f]{64})?$`)

// TestComposePinnedImages: every image the stack pulls, and every base
// image of the Dockerfile, names an exact version, so that a rebuild runs
// what was tested rather than the latest patch release.
func TestComposePinnedImages(t *testing.T) {
	f := loadCompose(t)
	for name, s := range f.Services {
		if s.Build != nil {
			continue // built here; its image is a local name
		}
		if !exactTag.MatchString(s.Image) {
			t.Errorf("service %s: image %q floats; want an exact version (NAME:1.2.3[@sha256:…])", name, s.Image)
		}
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	froms := 0
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) < 2 || !strings.EqualFold(fields[0], "FROM") {
			continue
		}
		froms++
		if !exactTag.MatchString(fields[1]) {
			t.Errorf("Dockerfile: FROM %s floats; want an exact version", fields[1])
		}
	}
	if froms == 0 {
		t.Errorf("Dockerfile: no FROM")
	}
	for _, bad := range []string{"nats:2.15-alpine", "golang:1.26", "alpine:3.22", "grafana/grafana:latest", "golang:1.26.8@sha256:abc"} {
		if exactTag.MatchString(bad) {
			t.Errorf("exactTag matches %q", bad)
		}
	}
}

// TestComposeHealthchecks: Prometheus and Grafana have healthchecks, and
// Grafana waits for a healthy Prometheus.
func TestComposeHealthchecks(t *testing.T) {
	f := loadCompose(t)
	for name, want := range map[string]string{"prometheus": ":9090/-/ready", "grafana": ":3000/api/health"} {
		s := f.service(t, name)
		if s.Healthcheck == nil || !strings.Contains(strings.Join(s.Healthcheck.Test, " "), want) {
			t.Errorf("%s: healthcheck %v; want one that queries %s", name, s.Healthcheck, want)
		}
	}
	deps, _ := f.service(t, "grafana").DependsOn.(map[string]any)
	p, _ := deps["prometheus"].(map[string]any)
	if p["condition"] != "service_healthy" {
		t.Errorf("grafana depends_on %v; want prometheus: {condition: service_healthy}", f.service(t, "grafana").DependsOn)
	}
}

// TestDockerfileCommand: the image's default command parses with the run
// command's flags and asks for a NATS URL, and run with it and no URL
// fails at once saying what to set, rather than start an embedded server
// on the container's loopback.
func TestDockerfileCommand(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var cmd []string
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "CMD "); ok {
			if err := json.Unmarshal([]byte(rest), &cmd); err != nil {
				t.Fatalf("Dockerfile: CMD %s: want the exec form: %v", rest, err)
			}
		}
	}
	c := consumerFlags(t, composeService{Command: cmd})
	if !c.requireURL {
		// Without it, run would start an embedded server and serve.
		t.Fatalf("Dockerfile: CMD %q has no -require-nats-url", cmd)
	}

	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, config.EnvPrefix) || strings.HasPrefix(k, "NATS_") {
			t.Setenv(k, v)
			os.Unsetenv(k)
		}
	}
	args := append([]string{}, cmd...)
	args = append(args, "-data", t.TempDir(), "-metrics", "off")
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	if !errors.Is(err, errNoNATSURL) {
		t.Fatalf("consumer %q without a NATS URL: %v; want errNoNATSURL", args, err)
	}
	if !strings.Contains(err.Error(), "ONCEGATE_NATS_URL") {
		t.Errorf("error %q does not say to set ONCEGATE_NATS_URL", err)
	}
	t.Setenv("ONCEGATE_NATS_URL", "nats://nats:4222")
	var c2 runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	c2.register(fs)
	if err := fs.Parse(cmd[1:]); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.load(); err != nil {
		t.Errorf("the default command with ONCEGATE_NATS_URL set: %v", err)
	}
}
