package helm_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	corev1 "k8s.io/api/core/v1"

	"github.com/oncegate/oncegate/internal/kubelettest"
	"github.com/oncegate/oncegate/internal/natstest"
)

// The pod of each documented values file, started as the kubelet would
// start it: the real consumer binary with the container's args and
// environment (each secretKeyRef and envFrom resolved from the Secrets
// the values file's header tells you to create, made with the same
// keys), its ConfigMap and Secrets mounted as kubelet lays volumes out
// (..data links, the volume's defaultMode, root's files in the pod's
// fsGroup), its emptyDir and claim as directories, as the pod's user
// (runAsUser, runAsGroup, fsGroup). It must become ready (/readyz, the
// readiness probe) against a NATS cluster of as many servers as the
// values file's replicas need, with accounts when it gives a creds
// Secret, and drain on SIGTERM.
//
// The pod's paths are taken below a temporary root: every mount path in
// the args and the configuration is prefixed with it (a path the pod does
// not mount is left alone, and fails as it would in the pod). Running as
// the pod's user needs root; elsewhere the files are the test's own, of
// the same modes less the group's bits, and it runs as the test's user.

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// consumerBinary builds the consumer once, where any user may run it.
func consumerBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the consumer binary")
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "oncegate-pod-bin-")
		if err != nil {
			binErr = err
			return
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "consumer")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/consumer")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// kubectlSecret matches a values file's `kubectl create secret generic`
// line.
var kubectlSecret = regexp.MustCompile(`(?m)^#\s+kubectl create secret generic (\S+)((?: --from-(?:literal|file)=\S+)+)\s*$`)

// secretsOf returns the Secrets a values file's header tells you to
// create, each key filled by make(name of the Secret, key).
func secretsOf(t *testing.T, file string, make func(secret, key string) []byte) map[string]map[string][]byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, file))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]byte{}
	for _, m := range kubectlSecret.FindAllStringSubmatch(string(data), -1) {
		keys := map[string][]byte{}
		for _, arg := range strings.Fields(m[2]) {
			_, kv, _ := strings.Cut(arg, "=")
			k, _, _ := strings.Cut(kv, "=")
			keys[k] = make(m[1], k)
		}
		out[m[1]] = keys
	}
	return out
}

// natsAccounts are an operator, its system account and one account with
// JetStream, for servers that check creds files.
type natsAccounts struct {
	operator *jwt.OperatorClaims
	sys      string
	resolver *server.MemAccResolver
	account  nkeys.KeyPair
}

func newNATSAccounts(t *testing.T) *natsAccounts {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, err := okp.PublicKey()
	must(err)
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "oncegate-test"
	sys, err := nkeys.CreateAccount()
	must(err)
	spub, err := sys.PublicKey()
	must(err)
	oc.SystemAccount = spub
	ojwt, err := oc.Encode(okp)
	must(err)
	oc, err = jwt.DecodeOperatorClaims(ojwt)
	must(err)
	res := &server.MemAccResolver{}
	sc := jwt.NewAccountClaims(spub)
	sc.Name = "SYS"
	sjwt, err := sc.Encode(okp)
	must(err)
	must(res.Store(spub, sjwt))
	akp, err := nkeys.CreateAccount()
	must(err)
	apub, err := akp.PublicKey()
	must(err)
	ac := jwt.NewAccountClaims(apub)
	ac.Name = "ONCEGATE"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1, MaxAckPending: -1}
	ajwt, err := ac.Encode(okp)
	must(err)
	must(res.Store(apub, ajwt))
	return &natsAccounts{operator: oc, sys: spub, resolver: res, account: akp}
}

func (a *natsAccounts) apply(o *server.Options) {
	o.TrustedOperators = []*jwt.OperatorClaims{a.operator}
	o.SystemAccount = a.sys
	o.AccountResolver = a.resolver
}

// creds returns a user's creds file of the account.
func (a *natsAccounts) creds(t *testing.T) []byte {
	t.Helper()
	ukp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name = "oncegate"
	ujwt, err := uc.Encode(a.account)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := ukp.Seed()
	b, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// TestPodStarts: the rendered pod of each documented values file starts
// the real consumer to ready, with its secret files laid out as kubelet
// lays them, and drains on SIGTERM. values-kv.yaml's once crash-looped:
// its encryption key, mounted 0440 under fsGroup, was refused.
func TestPodStarts(t *testing.T) {
	bin := consumerBinary(t)
	for _, f := range valuesFiles {
		t.Run(f, func(t *testing.T) { startPod(t, bin, f) })
	}
}

func startPod(t *testing.T, bin, file string) {
	// NATS: as many servers as the replicas the configuration asks, with
	// accounts if the pod brings a creds file.
	base := mustRender(t, []string{file})
	baseCfg := checkConfig(t, base.configMaps[0])
	n := max(baseCfg.Ledger.KV.Replicas, baseCfg.Stream.Replicas, baseCfg.LLM.Cache.KV.Replicas, 1)
	var accounts *natsAccounts
	var opts []func(*server.Options)
	if baseCfg.NATS.CredsFile != "" {
		accounts = newNATSAccounts(t)
		opts = append(opts, accounts.apply)
	}
	var urls []string
	if n == 1 {
		urls = []string{natstest.RunServer(t, opts...).ClientURL()}
	} else {
		for _, s := range natstest.RunCluster(t, n, opts...) {
			urls = append(urls, s.ClientURL())
		}
	}

	// The Secrets, as the values file's commands make them.
	secrets := secretsOf(t, file, func(secret, key string) []byte {
		switch key {
		case "nats.creds":
			return accounts.creds(t)
		case "key": // the encryption key: head -c 32 /dev/urandom
			b := make([]byte, 32)
			rand.Read(b)
			return b
		case "keys": // the proxy's clients
			return []byte("team-a sk-team-a-" + randomHex(16) + "\n")
		case "tokens": // the console's operators
			return []byte("alice " + randomHex(16) + "\n")
		}
		return []byte(randomHex(16))
	})

	// The rendering, on free ports of this host.
	metrics, hooks, console, proxy := freePort(t), freePort(t), freePort(t), freePort(t)
	o := mustRender(t, []string{file}, "nats.url="+strings.Join(urls, `\,`),
		"metrics.port="+strconv.Itoa(metrics), "ingress.port="+strconv.Itoa(hooks),
		"console.port="+strconv.Itoa(console), "proxy.port="+strconv.Itoa(proxy))
	p, _ := pod(t, o)
	c := p.Spec.Containers[0]
	psc := p.Spec.SecurityContext
	fsGroup := -1
	if psc.FSGroup != nil {
		fsGroup = int(*psc.FSGroup)
	}

	// The pod's file system, below root.
	root, err := os.MkdirTemp("", "oncegate-pod-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	var mountPaths []string
	for _, m := range c.VolumeMounts {
		mountPaths = append(mountPaths, m.MountPath)
	}
	sort.Slice(mountPaths, func(i, j int) bool { return len(mountPaths[i]) > len(mountPaths[j]) })
	var pairs []string
	for _, mp := range mountPaths {
		pairs = append(pairs, mp, root+mp)
	}
	inRoot := strings.NewReplacer(pairs...)
	volumes := map[string]corev1.Volume{}
	for _, v := range p.Spec.Volumes {
		volumes[v.Name] = v
	}
	asRoot := os.Geteuid() == 0
	for _, m := range c.VolumeMounts {
		dst := root + m.MountPath
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		v, ok := volumes[m.Name]
		switch {
		case !ok || v.EmptyDir != nil: // the claim (a StatefulSet's template), or an emptyDir
			if err := os.MkdirAll(dst, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dst, 0o777); err != nil {
				t.Fatal(err)
			}
		case v.ConfigMap != nil:
			if len(o.configMaps) != 1 || m.SubPath == "" {
				t.Fatalf("volume %s: want the one ConfigMap, mounted by subPath", m.Name)
			}
			data := inRoot.Replace(o.configMaps[0].Data[m.SubPath])
			if err := os.WriteFile(dst, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		case v.Secret != nil:
			s, ok := secrets[v.Secret.SecretName]
			if !ok {
				t.Fatalf("volume %s: Secret %s, which %s's header does not tell you to create", m.Name, v.Secret.SecretName, file)
			}
			var files []kubelettest.File
			if len(v.Secret.Items) > 0 {
				for _, it := range v.Secret.Items {
					content, ok := s[it.Key]
					if !ok {
						t.Fatalf("volume %s: key %s of Secret %s, which the header does not make", m.Name, it.Key, v.Secret.SecretName)
					}
					var mode fs.FileMode
					if it.Mode != nil {
						mode = fs.FileMode(*it.Mode)
					}
					files = append(files, kubelettest.File{Path: it.Path, Content: content, Mode: mode})
				}
			} else {
				for k, content := range s {
					files = append(files, kubelettest.File{Path: k, Content: content})
				}
			}
			mode := fs.FileMode(0o644) // kubelet's default
			if v.Secret.DefaultMode != nil {
				mode = fs.FileMode(*v.Secret.DefaultMode)
			}
			if !asRoot {
				mode &^= 0o070 // files of the test's own user: readable by it alone
			}
			if _, err := kubelettest.Volume(dst, files, mode, fsGroup); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("volume %s: a kind this test does not lay out: %+v", m.Name, v)
		}
	}

	// The environment, from the Secrets.
	env := []string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secrets[ref.Name][ref.Key]
			if !ok {
				t.Fatalf("env %s: key %s of Secret %s, which %s's header does not make", e.Name, ref.Key, ref.Name, file)
			}
			env = append(env, e.Name+"="+string(v))
		case e.ValueFrom != nil:
			t.Fatalf("env %s: a source this test does not resolve", e.Name)
		default:
			env = append(env, e.Name+"="+inRoot.Replace(e.Value))
		}
	}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef == nil {
			t.Fatalf("envFrom %+v: a source this test does not resolve", ef)
		}
		for k, v := range secrets[ef.SecretRef.Name] {
			env = append(env, ef.Prefix+k+"="+string(v))
		}
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = inRoot.Replace(a)
	}

	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir = env, root
	if asRoot {
		uid, gid := uint32(*psc.RunAsUser), uint32(*psc.RunAsGroup)
		groups := []uint32{}
		if fsGroup >= 0 {
			groups = append(groups, uint32(fsGroup))
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	} else {
		t.Logf("not root: the pod runs as the test's user, its secret files the test's own")
	}
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
		}
	})

	// The readiness probe.
	probe := fmt.Sprintf("http://127.0.0.1:%d%s", metrics, c.ReadinessProbe.HTTPGet.Path)
	deadline := time.NewTimer(90 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ready := false; !ready; {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the pod's consumer exited before it was ready: %v\n%s", err, out.String())
		case <-deadline.C:
			t.Fatalf("the pod's consumer not ready (%s) after 90s:\n%s", probe, out.String())
		case <-tick.C:
			if resp, err := http.Get(probe); err == nil {
				resp.Body.Close()
				ready = resp.StatusCode == http.StatusOK
			}
		}
	}

	// The kubelet's stop: SIGTERM, then the grace period.
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the pod's consumer exited with %v after SIGTERM:\n%s", err, out.String())
		}
	case <-time.After(time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second):
		t.Errorf("the pod's consumer did not stop within its grace period:\n%s", out.String())
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("output:\n%s", out.String())
	}
}

// lockedBuffer is a buffer safe for the child's two writers and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
