package haproxy

import (
	"slices"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// TLS termination of TCP services ("NS/SERVICE:PORT::ssl"): the port's
// bind lines load the default certificate file, the one the https
// frontend serves to clients without a matching SNI. HAProxy keeps one
// certificate store per file, so the Runtime API update of that file
// (tlsCommands) reaches these frontends too.

// tcpBindTLS is what a TCP service's bind lines add for TLS.
func (r renderer) tcpBindTLS(t model.TCPService) string {
	if !t.SSL {
		return ""
	}
	return " ssl crt " + r.certPath(defaultCertFile)
}

func hasTCPTLS(st *state) bool {
	return slices.ContainsFunc(st.extras.tcp, func(t model.TCPService) bool { return t.SSL })
}

// tcpCertSteps update the default certificate for the TCP services when
// the https frontend, which otherwise does it, is not rendered.
func (r renderer) tcpCertSteps(cur, next *state) []runtimeStep {
	if !hasTCPTLS(cur) || !hasTCPTLS(next) || cur.tls.defaultCert == nil || next.tls.defaultCert == nil ||
		cur.tls.defaultCert.equal(next.tls.defaultCert) {
		return nil
	}
	path := r.certPath(defaultCertFile)
	return []runtimeStep{
		{cmd: "set ssl cert " + path, payload: string(next.tls.defaultCert.pem)},
		{cmd: "commit ssl cert " + path},
	}
}
