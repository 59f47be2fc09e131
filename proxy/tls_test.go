package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a leaf certificate for 127.0.0.1 and its key into dir.
func (ca *testCA) issue(t *testing.T, dir, name string, serial int64) (certFile, keyFile string) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

func TestTLSBothWays(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newCA(t)
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.pem, 0o600)

	bc, bk := ca.issue(t, dir, "backend", 10)
	be := httptest.NewUnstartedServer(sseHandler(2, 0))
	pair, err := tls.LoadX509KeyPair(bc, bk)
	if err != nil {
		t.Fatal(err)
	}
	be.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	be.StartTLS()
	defer be.Close()

	gc, gk := ca.issue(t, dir, "gateway", 20)
	cfg := testConfig(be.URL)
	p := cfg.Pools["p"]
	p.Backends[0].TLS.CAFile = caFile
	cfg.Pools["p"] = p
	cfg.Server.TLS = ServerTLS{CertFile: gc, KeyFile: gk}
	gw := startGateway(t, cfg)
	url := strings.Replace(gw.URL, "http://", "https://", 1)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	serial := func() int64 {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
		resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(streamBody))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.HasSuffix(string(body), doneEvent) {
			t.Fatalf("HTTPS through HTTPS: status %d body %q", resp.StatusCode, body)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	if s := serial(); s != 20 {
		t.Fatalf("gateway served certificate %d, want 20", s)
	}
	// Streams in a row on one kept-alive TLS connection: the hijacked
	// connection goes back to the server between them.
	keep := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, MaxIdleConnsPerHost: 1}}
	conns := map[string]bool{}
	for i := range 3 {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(streamBody))
		var local string
		resp, err := keep.Do(req.WithContext(withConnTrace(req.Context(), &local)))
		if err != nil {
			t.Fatalf("kept-alive TLS stream %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasSuffix(string(body), doneEvent) {
			t.Fatalf("kept-alive TLS stream %d: %q", i, body)
		}
		conns[local] = true
	}
	if len(conns) != 1 {
		t.Errorf("3 TLS streams used %d connections, want 1 kept alive", len(conns))
	}
	// A reload re-reads the certificate files.
	ca.issue(t, dir, "gateway", 21)
	cfg2 := gw.Config()
	if err := gw.Reload(cfg2); err != nil {
		t.Fatal(err)
	}
	if s := serial(); s != 21 {
		t.Errorf("after reload the gateway served certificate %d, want 21", s)
	}
	// A refused reload changes nothing, the certificate included: here
	// the new certificate is fine but the file changes a setting that
	// needs a restart.
	ca.issue(t, dir, "gateway", 22)
	refused := gw.Config()
	refused.RequestLog.Path = filepath.Join(dir, "new.jsonl")
	if err := gw.Reload(refused); err == nil {
		t.Fatal("a reload that changes request_log.path was accepted")
	}
	if s := serial(); s != 21 {
		t.Errorf("after a refused reload the gateway served certificate %d, want still 21", s)
	}
	// A broken certificate file (a half-written Secret, a wrong key) is
	// refused with the file named, and the old pair and config stay whole.
	hash := gw.state.Load().configHash
	os.WriteFile(gc, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n"), 0o600)
	err = gw.Reload(gw.Config())
	if err == nil || !strings.Contains(err.Error(), "tls") {
		t.Errorf("a reload with a broken certificate: %v, want refused naming tls", err)
	}
	other, otherKey := ca.issue(t, dir, "other", 30)
	os.Rename(other, gc)
	os.WriteFile(gk, []byte("garbage"), 0o600)
	_ = otherKey
	if err := gw.Reload(gw.Config()); err == nil {
		t.Error("a reload with a certificate and a key that do not match was accepted")
	}
	if s := serial(); s != 21 || gw.state.Load().configHash != hash {
		t.Errorf("after broken reloads: certificate %d (want 21), config hash changed %v", s, gw.state.Load().configHash != hash)
	}

	// A backend whose certificate is not trusted is refused.
	cfg3 := testConfig(be.URL)
	cfg3.Retries.Max = -1
	gw3 := startGateway(t, cfg3)
	if code, _, body := post(t, gw3.URL, "/v1/chat/completions", plainBody); code != 502 {
		t.Errorf("untrusted backend: status %d %s, want 502", code, body)
	}
}
