package httponce_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
	"github.com/oncegate/oncegate/pkg/dedupe/httponce"
	"github.com/oncegate/oncegate/pkg/dedupe/jskv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestMain runs the test binary as a charge server when asked to by
// TestKillBetweenEffectAndCommit (HTTPONCE_CHILD set), and otherwise runs
// the tests and fails them if they leave goroutines behind.
func TestMain(m *testing.M) {
	if os.Getenv("HTTPONCE_CHILD") != "" {
		if err := serveCharges(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// serveCharges is the child: an HTTP server whose POST /charges, behind
// httponce, charges at the payment provider HTTPONCE_PROVIDER, a one-shot
// effect (the provider does not dedupe). Work taken over from a dead server
// is reconciled first: the provider is asked for a charge carrying the
// intent's key. With HTTPONCE_CRASH set, the process kills itself
// (SIGKILL) right after the charge, before httponce records the response.
func serveCharges() error {
	ctx := context.Background()
	var l dedupe.Ledger
	lease := time.Second
	switch kind, where, _ := strings.Cut(os.Getenv("HTTPONCE_LEDGER"), ":"); kind {
	case "badger":
		b, err := badgerledger.Open(where, badgerledger.Options{})
		if err != nil {
			return err
		}
		defer b.Close()
		l = b
	case "jskv":
		nc, err := nats.Connect(where)
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		k, err := jskv.New(ctx, js, jskv.Options{})
		if err != nil {
			return err
		}
		defer k.Close()
		l = k
	default:
		return fmt.Errorf("HTTPONCE_LEDGER %q", os.Getenv("HTTPONCE_LEDGER"))
	}
	once, err := httponce.Middleware(l, httponce.Options{Client: byUser, Required: true, Lease: lease})
	if err != nil {
		return err
	}
	provider := os.Getenv("HTTPONCE_PROVIDER")
	crash := os.Getenv("HTTPONCE_CRASH") != ""
	mux := http.NewServeMux()
	mux.Handle("POST /charges", once(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, _ := dedupe.IntentFrom(r.Context())
		ref := in.Key.String()
		if dedupe.TakenOver(r.Context()) {
			// A server died handling this work: did its charge go out?
			if id, err := findCharge(provider, ref); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway) // not kept: retried
				return
			} else if id != "" {
				w.Header().Set("X-Reconciled", "true")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"id":%q}`, id)
				return
			}
		}
		id, err := makeCharge(provider, ref)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if crash {
			syscall.Kill(os.Getpid(), syscall.SIGKILL) // between the effect and the commit
			select {}
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, id)
	})))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", ln.Addr())
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	io.Copy(io.Discard, os.Stdin) // until the parent closes it
	return srv.Close()
}

func makeCharge(provider, ref string) (string, error) {
	resp, err := http.Post(provider+"/charges?ref="+ref, "text/plain", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), nil
}

func findCharge(provider, ref string) (string, error) {
	resp, err := http.Get(provider + "/charges?ref=" + ref)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), nil
}

// provider is a payment provider that charges every time it is asked (a
// one-shot effect) and finds charges by reference.
type provider struct {
	mu      sync.Mutex
	charges []string // references, in order
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ref := r.URL.Query().Get("ref")
	switch r.Method {
	case http.MethodPost:
		p.charges = append(p.charges, ref)
		fmt.Fprintf(w, "ch_%d", len(p.charges))
	case http.MethodGet:
		for i, c := range p.charges {
			if c == ref {
				fmt.Fprintf(w, "ch_%d", i+1)
				return
			}
		}
	}
}

// server is a charge server process.
type server struct {
	cmd   *exec.Cmd
	addr  string
	stdin io.Closer
	done  chan error
}

func startServer(t *testing.T, env ...string) *server {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, "HTTPONCE_CHILD=1")...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("the charge server did not start: %v", err)
	}
	s.addr = strings.TrimSpace(strings.TrimPrefix(line, "listening "))
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-s.done
		}
	})
	return s
}

// TestKillBetweenEffectAndCommit: a charge server is killed (SIGKILL)
// after its handler charged the card and before httponce recorded the
// response. The client's retry, to the next server process, gets 201 with
// the one charge, found by the handler's reconcile (it took the work over:
// dedupe.TakenOver); the provider charged once; a later retry is a
// replay. On a Badger ledger the next process takes the work over at once;
// on a JetStream KV ledger the retry is answered 409 with Retry-After
// until the dead server's claim runs out.
func TestKillBetweenEffectAndCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	ns := natstest.RunServer(t)
	for _, kind := range []string{"badger", "jskv"} {
		t.Run(kind, func(t *testing.T) {
			p := &provider{}
			ps := httptest.NewServer(p)
			defer ps.Close()
			ledger := "badger:" + t.TempDir()
			if kind == "jskv" {
				ledger = "jskv:" + ns.ClientURL()
			}
			env := []string{"HTTPONCE_LEDGER=" + ledger, "HTTPONCE_PROVIDER=" + ps.URL}
			const key = `"0d9b1f5e-7c7a-4f57-9a38-6c1e3d0a2b44"`
			post := func(addr string) (*http.Response, string, error) {
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/charges", strings.NewReader(`{"amount":1000}`))
				req.Header.Set("Idempotency-Key", key)
				req.SetBasicAuth("alice", "pw")
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return nil, "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return resp, string(b), err
			}

			first := startServer(t, append(env, "HTTPONCE_CRASH=1")...)
			if _, _, err := post(first.addr); err == nil {
				t.Fatal("the first server answered; want it killed mid-request")
			}
			err := <-first.done
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the first server ended with %v; want SIGKILL", err)
			}
			first.done <- err // for its cleanup

			second := startServer(t, env...)
			var resp *http.Response
			var body string
			conflicts := 0
			deadline := time.Now().Add(20 * time.Second)
			for {
				resp, body, err = post(second.addr)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
					break
				}
				conflicts++
				secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
				if err != nil || secs < 1 {
					t.Fatalf("409 with Retry-After %q; want seconds", resp.Header.Get("Retry-After"))
				}
				time.Sleep(time.Duration(secs) * time.Second)
			}
			var charge struct{ ID string }
			json.Unmarshal([]byte(body), &charge)
			if resp.StatusCode != http.StatusCreated || charge.ID != "ch_1" || resp.Header.Get("X-Reconciled") != "true" {
				t.Errorf("the retry got %d %s (reconciled: %q); want 201 with ch_1, reconciled", resp.StatusCode, body, resp.Header.Get("X-Reconciled"))
			}
			again, againBody, err := post(second.addr)
			if err != nil || again.StatusCode != http.StatusCreated || againBody != body || again.Header.Get(httponce.HeaderReplayed) != "true" {
				t.Errorf("a later retry got %v %q %v; want the same 201, replayed", again, againBody, err)
			}
			p.mu.Lock()
			charges := len(p.charges)
			p.mu.Unlock()
			if charges != 1 {
				t.Errorf("the provider charged %d times; want 1", charges)
			}
			if kind == "badger" && conflicts > 0 {
				t.Errorf("the retry met %d conflicts; want the next process to take the work over at once", conflicts)
			}
			t.Logf("%s: the retry met %d conflicts (409) before the takeover", kind, conflicts)
		})
	}
}
