package console

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// The sign-in back-off. Failed sign-ins are counted per client address
// and over all addresses; past a number of failures free of charge, each
// failure makes the next sign-in wait, twice as long as the last wait, up
// to a ceiling. While it waits, a sign-in is answered 429 with
// Retry-After and its token is not looked at, so a guesser learns
// nothing. A success forgets its address's failures (not the global
// count); an address (or the whole console) with no failure for
// backoffQuiet starts afresh.
const (
	// clientFree is how many failures one address makes before it waits.
	clientFree = 5
	// globalFree is how many failures all addresses together make before
	// every sign-in waits: a guesser spread over many addresses is slowed
	// too.
	globalFree = 100
	// firstWait is the first wait; each further failure doubles it.
	firstWait = time.Second
	// clientMaxWait and globalMaxWait are the ceilings.
	clientMaxWait = 15 * time.Minute
	globalMaxWait = time.Minute
	// backoffQuiet is how long without a failure wipes the count.
	backoffQuiet = time.Hour
	// maxClients bounds the addresses remembered; past it, addresses
	// quiet for backoffQuiet are forgotten, and a new address is counted
	// in the global count only until there is room.
	maxClients = 10000
)

// tries is the failed sign-ins of an address, or of all of them.
type tries struct {
	failures int
	last     time.Time // the last failure
	until    time.Time // no sign-in before
}

func (t *tries) wait(now time.Time) time.Duration {
	if now.Before(t.until) {
		return t.until.Sub(now)
	}
	return 0
}

func (t *tries) quiet(now time.Time) bool { return now.Sub(t.last) > backoffQuiet }

// fail counts a failure at now, and sets the wait it starts.
func (t *tries) fail(now time.Time, free int, ceiling time.Duration) {
	if t.quiet(now) {
		t.failures = 0
	}
	t.failures++
	t.last = now
	if n := t.failures - free; n >= 0 {
		d := ceiling
		if n < 30 && firstWait<<n < ceiling {
			d = firstWait << n
		}
		t.until = now.Add(d)
	}
}

// backoff is the sign-in back-off's state. It is safe for concurrent use.
type backoff struct {
	mu      sync.Mutex
	clients map[string]*tries
	all     tries
}

// wait returns how long a sign-in from client must wait at now: 0, or
// the longer of its address's wait and the global one.
func (b *backoff) wait(client string, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.all.wait(now)
	if t, ok := b.clients[client]; ok {
		w = max(w, t.wait(now))
	}
	return w
}

// failed counts a failed sign-in from client at now, and returns how many
// its address has made (since it was last quiet or signed in).
func (b *backoff) failed(client string, now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all.fail(now, globalFree, globalMaxWait)
	t, ok := b.clients[client]
	if !ok {
		if b.clients == nil {
			b.clients = map[string]*tries{}
		}
		if len(b.clients) >= maxClients {
			for k, c := range b.clients {
				if c.quiet(now) && !now.Before(c.until) {
					delete(b.clients, k)
				}
			}
		}
		if len(b.clients) >= maxClients {
			return 0
		}
		t = &tries{}
		b.clients[client] = t
	}
	t.fail(now, clientFree, clientMaxWait)
	return t.failures
}

// succeeded forgets client's failures.
func (b *backoff) succeeded(client string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.clients, client)
}

// clientOf returns the address a request's back-off is counted under: its
// IP address, and for IPv6 its /64 (one host commonly has a whole /64).
// Behind a reverse proxy every request comes from the proxy's address, and
// the per-address count is the global one; a forwarded-for header is not
// believed.
func clientOf(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}
