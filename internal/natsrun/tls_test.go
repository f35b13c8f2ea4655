package natsrun_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/oncegate/oncegate/internal/natsrun"
	"github.com/oncegate/oncegate/internal/natstest"
)

// testPKI is a throwaway CA with a server certificate for 127.0.0.1 and
// localhost and a client certificate, written as PEM files.
type testPKI struct {
	pool                      *x509.CertPool
	server                    tls.Certificate
	caFile, certFile, keyFile string // the CA, and the client's certificate and key
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "natsrun test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	p := &testPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.caFile = write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	sc, sk := issue(2, "natsrun test server", x509.ExtKeyUsageServerAuth)
	if p.server, err = tls.X509KeyPair(sc, sk); err != nil {
		t.Fatal(err)
	}
	cc, ck := issue(3, "natsrun test client", x509.ExtKeyUsageClientAuth)
	p.certFile, p.keyFile = write("client.pem", cc), write("client-key.pem", ck)
	return p
}

// runTLSServer runs a server that requires TLS with p's server
// certificate and, if mutual, a client certificate from p's CA.
func (p *testPKI) runTLSServer(t *testing.T, mutual bool) *server.Server {
	t.Helper()
	return natstest.RunServer(t, func(o *server.Options) {
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
		o.TLSTimeout = 5
		if mutual {
			o.TLSConfig.ClientAuth = tls.RequireAndVerifyClientCert
			o.TLSConfig.ClientCAs = p.pool
			o.TLSVerify = true
		}
	})
}

func TestConnectTLS(t *testing.T) {
	pki := newTestPKI(t)
	plain := pki.runTLSServer(t, false)
	mutual := pki.runTLSServer(t, true)
	// Dial by IP with the nats:// scheme: the TLS files alone make the
	// connection TLS.
	url := func(s *server.Server) string { return "nats://" + s.Addr().String() }

	tests := []struct {
		name    string
		srv     *server.Server
		tls     natsrun.TLS
		wantErr string // "" for success
	}{
		{"CA file", plain, natsrun.TLS{CAFile: pki.caFile}, ""},
		{"client certificate", mutual, natsrun.TLS{CAFile: pki.caFile, CertFile: pki.certFile, KeyFile: pki.keyFile}, ""},
		{"system roots only", plain, natsrun.TLS{CertFile: pki.certFile, KeyFile: pki.keyFile}, "unknown authority"},
		{"no TLS configured", plain, natsrun.TLS{}, "unknown authority"},
		{"mutual without client certificate", mutual, natsrun.TLS{CAFile: pki.caFile}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := connect(t, natsrun.Options{TLS: tt.tls, ConnectTimeout: 5 * time.Second}, url(tt.srv), env(nil))
			if tt.name == "mutual without client certificate" {
				// TLS 1.3 reports a missing client certificate after the
				// handshake, so the failure shows at connect or at the first
				// round trip.
				if err == nil {
					err = nc.FlushTimeout(waitTimeout)
				}
				if err == nil {
					t.Fatalf("connected to a mutual-TLS server without a client certificate")
				}
				t.Logf("error: %v", err)
				return
			}
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Connect(TLS %+v) succeeded; want an error", tt.tls)
				}
				t.Logf("error: %v", err)
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Connect(TLS %+v) error = %v; want it to mention %q", tt.tls, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Connect(TLS %+v) error = %v", tt.tls, err)
			}
			if err := nc.FlushTimeout(waitTimeout); err != nil {
				t.Fatalf("Flush error = %v", err)
			}
			cs, err := nc.TLSConnectionState()
			if err != nil || !cs.HandshakeComplete {
				t.Errorf("TLSConnectionState() = %+v, %v; want a completed handshake", cs, err)
			}
		})
	}
}
