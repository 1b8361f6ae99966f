package syngate

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Conn is a TCP connection to one of the ingress addresses that the edge
// still has to serve or close.
type Conn struct {
	Local, Remote netip.AddrPort
	State         string
}

func (c Conn) String() string { return fmt.Sprintf("%s<-%s %s", c.Local, c.Remote, c.State) }

// inProgress are the TCP states in which the edge still owes the client
// something: a handshake to finish, a request to answer, data or a FIN the
// client has not acknowledged. TIME-WAIT and FIN-WAIT-2 only wait for the
// client, which no longer needs this edge.
var inProgress = map[uint8]string{
	unix.BPF_TCP_ESTABLISHED: "established",
	unix.BPF_TCP_SYN_RECV:    "syn-recv",
	unix.BPF_TCP_FIN_WAIT1:   "fin-wait-1",
	unix.BPF_TCP_CLOSE_WAIT:  "close-wait",
	unix.BPF_TCP_LAST_ACK:    "last-ack",
	unix.BPF_TCP_CLOSING:     "closing",
}

// Connections lists the connections in progress to addrs on any port, read
// from the kernel (sock_diag) rather than from HAProxy: it also sees the
// handshakes not yet accepted and the connections of old HAProxy workers.
// Connections over lo (local clients, the daemon's own probes) are left
// out: no router moves them.
func Connections(addrs []netip.Addr) ([]Conn, error) {
	var out []Conn
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		socks, err := netlink.SocketDiagTCP(fam)
		if err != nil {
			return nil, fmt.Errorf("sock_diag: %w", err)
		}
		for _, s := range socks {
			state, ok := inProgress[s.State]
			if !ok {
				continue
			}
			local, _ := netip.AddrFromSlice(s.ID.Source)
			remote, _ := netip.AddrFromSlice(s.ID.Destination)
			local, remote = local.Unmap(), remote.Unmap()
			if !slices.Contains(addrs, local) || slices.Contains(addrs, remote) || remote.IsLoopback() {
				continue
			}
			out = append(out, Conn{
				Local:  netip.AddrPortFrom(local, s.ID.SourcePort),
				Remote: netip.AddrPortFrom(remote, s.ID.DestinationPort),
				State:  state,
			})
		}
	}
	return out, nil
}
