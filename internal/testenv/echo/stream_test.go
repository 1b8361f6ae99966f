package echo

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"testing"
	"time"

	"sigs.k8s.io/gateway-api/conformance/echo-basic/tcpserver"
)

// TestServeTCP talks to ServeTCP as the suite's TCP client does, in clear
// and over TLS.
func TestServeTCP(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{"abc.example.com"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	ctx := tcpserver.Context{Namespace: "ns", Pod: "tcp-backend-0", TCPPort: "3000", TLSPort: "8443"}

	for _, useTLS := range []bool{false, true} {
		t.Run(fmt.Sprint("tls=", useTLS), func(t *testing.T) {
			server, client := net.Pipe()
			var srv net.Conn = server
			var cl net.Conn = client
			if useTLS {
				srv = tls.Server(server, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
				cl = tls.Client(client, &tls.Config{ServerName: "abc.example.com", RootCAs: roots})
			}
			done := make(chan error, 1)
			go func() { done <- ServeTCP(srv, ctx) }()
			r := bufio.NewReader(cl)
			line := func(send string) string {
				t.Helper()
				if send != "" {
					if _, err := fmt.Fprintf(cl, "%s\n", send); err != nil {
						t.Fatal(err)
					}
				}
				s, err := r.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			if got := line(""); got != tcpserver.WelcomeMessage {
				t.Fatalf("welcome %q", got)
			}
			if got := line("PING"); got != "PONG\n" {
				t.Errorf("PING: %q", got)
			}
			if got := line("IS_TLS"); got != fmt.Sprintf("%t\n", useTLS) {
				t.Errorf("IS_TLS: %q", got)
			}
			var a tcpserver.TCPAssertions
			if err := json.Unmarshal([]byte(line("TEST")), &a); err != nil {
				t.Fatal(err)
			}
			if a.Context != ctx || a.IsTLS != useTLS || (a.TLSAssertion != nil) != useTLS {
				t.Errorf("TEST: %+v", a)
			}
			if useTLS && a.TLSAssertion.ServerName != "abc.example.com" {
				t.Errorf("TEST server name: %q", a.TLSAssertion.ServerName)
			}
			cl.Close()
			if err := <-done; err != nil {
				t.Errorf("ServeTCP: %v", err)
			}
		})
	}
}
