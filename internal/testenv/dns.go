package testenv

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNSServer is an authoritative DNS server on loopback UDP that answers A
// and AAAA queries from a table the test sets: names not in it do not
// exist (NXDOMAIN). Answers carry a TTL of 1s.
type DNSServer struct {
	// Addr is HOST:PORT of the server.
	Addr string

	conn  net.PacketConn
	mu    sync.Mutex
	names map[string][]netip.Addr
	done  chan struct{}
}

// StartDNS starts a DNSServer, stopped when the test ends.
func StartDNS(tb testing.TB) *DNSServer {
	tb.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	d := &DNSServer{Addr: conn.LocalAddr().String(), conn: conn, names: map[string][]netip.Addr{}, done: make(chan struct{})}
	go d.serve()
	tb.Cleanup(func() {
		conn.Close()
		<-d.done
	})
	return d
}

// Set makes name resolve to addrs; no addrs removes the name.
func (d *DNSServer) Set(name string, addrs ...string) {
	key := strings.ToLower(strings.TrimSuffix(name, "."))
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(addrs) == 0 {
		delete(d.names, key)
		return
	}
	d.names[key] = nil
	for _, a := range addrs {
		d.names[key] = append(d.names[key], netip.MustParseAddr(a))
	}
}

func (d *DNSServer) serve() {
	defer close(d.done)
	buf := make([]byte, 512)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if out, ok := d.answer(buf[:n]); ok {
			_, _ = d.conn.WriteTo(out, from)
		}
	}
}

func (d *DNSServer) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	key := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	d.mu.Lock()
	addrs, known := d.names[key]
	d.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	for _, a := range addrs {
		res := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			if b.AResource(res, dnsmessage.AResource{A: a.As4()}) != nil {
				return nil, false
			}
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			if b.AAAAResource(res, dnsmessage.AAAAResource{AAAA: a.As16()}) != nil {
				return nil, false
			}
		}
	}
	out, err := b.Finish()
	return out, err == nil
}
