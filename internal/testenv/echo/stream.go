package echo

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"

	"sigs.k8s.io/gateway-api/conformance/echo-basic/tcpserver"
)

// PodOf is the pod a connection reached, by its local address.
func (p *Pods) PodOf(c net.Conn) (Pod, bool) {
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	if err != nil {
		return Pod{}, false
	}
	return p.lookup(ap.Addr())
}

// ServeTCP answers one connection as echo-basic's TCP echo server
// (TCP_ECHO_SERVER) does: a welcome line, then PING, IS_TLS and TEST
// (a JSON description of the pod and of the TLS session) line by line.
// A *tls.Conn is handshaken first and reported as TLS. It closes c.
func ServeTCP(c net.Conn, ctx tcpserver.Context) error {
	defer c.Close()
	a := tcpserver.TCPAssertions{Context: ctx}
	if tc, ok := c.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("tls handshake: %w", err)
		}
		s := tc.ConnectionState()
		a.IsTLS = true
		a.TLSAssertion = &tcpserver.TLSAssertions{
			Version:            tls.VersionName(s.Version),
			ServerName:         s.ServerName,
			NegotiatedProtocol: s.NegotiatedProtocol,
			Curves:             s.CurveID.String(),
			CipherSuite:        tls.CipherSuiteName(s.CipherSuite),
		}
	}
	payload, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprint(c, tcpserver.WelcomeMessage); err != nil {
		return err
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		var out string
		switch sc.Text() {
		case "TEST":
			out = string(payload)
		case "IS_TLS":
			out = fmt.Sprint(a.IsTLS)
		case "PING":
			out = "PONG"
		default:
			continue
		}
		if _, err := fmt.Fprintf(c, "%s\n", out); err != nil {
			return err
		}
	}
	return sc.Err()
}
