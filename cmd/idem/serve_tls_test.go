package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPKI is a CA, and certificates it signed, written as PEM files.
type testPKI struct {
	t    *testing.T
	dir  string
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	n    int64
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{t: t, dir: t.TempDir(), pool: x509.NewCertPool()}
	p.ca, p.key = p.issue("test CA", nil, true)
	p.pool.AddCert(p.ca)
	p.write("ca.pem", "CERTIFICATE", p.ca.Raw)
	return p
}

// issue makes a certificate for cn, signed by the CA (self-signed for the
// CA itself); a server certificate names 127.0.0.1.
func (p *testPKI) issue(cn string, usage []x509.ExtKeyUsage, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	p.n++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.n), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: usage, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	parent, signer := tmpl, key
	if !isCA {
		parent, signer = p.ca, p.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		p.t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		p.t.Fatal(err)
	}
	return cert, key
}

// pair writes a certificate for cn and its key, and returns their files
// and the pair for a tls.Config.
func (p *testPKI) pair(cn string, usage x509.ExtKeyUsage) (certFile, keyFile string, pair tls.Certificate) {
	p.t.Helper()
	cert, key := p.issue(cn, []x509.ExtKeyUsage{usage}, false)
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		p.t.Fatal(err)
	}
	certFile, keyFile = p.write(cn+".pem", "CERTIFICATE", cert.Raw), p.write(cn+".key", "EC PRIVATE KEY", der)
	pair, err = tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		p.t.Fatal(err)
	}
	return certFile, keyFile, pair
}

func (p *testPKI) write(name, typ string, der []byte) string {
	p.t.Helper()
	file := filepath.Join(p.dir, name)
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return file
}

// --tls-cert and --tls-key serve HTTPS and HTTP/2; with --client-ca and
// --scope-header client-cert, keys are scoped by the client's
// certificate: two clients with one key are two operations, a client's
// retry is a replay, and a client without a certificate is refused (no
// scope).
func TestServeTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	certFile, keyFile, _ := pki.pair("gateway", x509.ExtKeyUsageServerAuth)
	_, _, alice := pki.pair("alice", x509.ExtKeyUsageClientAuth)
	_, _, bob := pki.pair("bob", x509.ExtKeyUsageClientAuth)
	up := newExecUpstream(false, 0)
	gw := startGateway(t, nil, "--upstream", upstreamServer(t, up), "--db", testDB(t, "sqlite"),
		"--tls-cert", certFile, "--tls-key", keyFile, "--client-ca", filepath.Join(pki.dir, "ca.pem"), "--scope-header", "client-cert")
	if !strings.HasPrefix(gw.url, "https://") {
		t.Fatalf("listening on %s, want https://", gw.url)
	}
	clientWith := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{RootCAs: pki.pool, Certificates: certs}}}
	}
	post := func(c *http.Client) answer {
		t.Helper()
		a, err := send(context.Background(), c, gw.url+"/charges", `{"amount":1}`, "Idempotency-Key: tls-1", "Authorization:")
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a1, b1, a2 := post(clientWith(alice)), post(clientWith(bob)), post(clientWith(alice))
	if a1.status != 201 || b1.status != 201 || b1.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("alice %d %q, bob %d %v", a1.status, a1.body, b1.status, b1.header)
	}
	if a2.header.Get("Idempotent-Replayed") != "true" || a2.body != a1.body {
		t.Fatalf("alice's retry: %d %v %q, want the replay of %q", a2.status, a2.header, a2.body, a1.body)
	}
	if n := up.seenKey("tls-1"); n != 2 {
		t.Fatalf("the upstream ran %d times, want 2 (one per certificate)", n)
	}
	if a := post(clientWith()); a.status != 400 || !strings.Contains(a.body, "scope-missing") {
		t.Fatalf("no client certificate: %d %q", a.status, a.body)
	}
	resp, err := clientWith(alice).Get(gw.url + "/proto")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Proto != "HTTP/2.0" {
		t.Errorf("a client that offers HTTP/2 got %s", resp.Proto)
	}
}

// Each TLS flag that cannot work is named, and the gateway does not start.
func TestServeTLSFlags(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	certFile, keyFile, _ := pki.pair("gateway", x509.ExtKeyUsageServerAuth)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", certFile}, "--tls-cert: --tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", certFile, "--tls-key", certFile}, "--tls-cert: tls:"},
		{[]string{"--client-ca", filepath.Join(pki.dir, "ca.pem")}, "--client-ca: needs --tls-cert"},
		{[]string{"--scope-header", "client-cert"}, "--scope-header: client-cert needs --tls-cert, --tls-key and --client-ca"},
		{[]string{"--tls-cert", certFile, "--tls-key", keyFile, "--scope-header", "client-cert"}, "--scope-header: client-cert needs --tls-cert, --tls-key and --client-ca"},
		{[]string{"--tls-cert", certFile, "--tls-key", keyFile, "--client-ca", keyFile}, "holds no PEM certificate"},
	} {
		out, err := exec.Command(idemBin, append([]string{"serve", "--demo", "--check"}, tt.args...)...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tt.want) {
			t.Errorf("%v: %v\n%s\nwant exit 2 and %q", tt.args, err, out, tt.want)
		}
	}
}
