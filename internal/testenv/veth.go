package testenv

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultLinkRange is where veth /31s come from when the caller names no
// range. Packages that run concurrently should each pass their own
// (LinkRange) so addresses say whose they are; allocation is safe either way.
const DefaultLinkRange = "198.19.0.0/17"

var (
	linkSpace    = netip.MustParsePrefix("198.19.0.0/16")
	podSpace     = netip.MustParsePrefix(GuardRange)
	serviceSpace = netip.MustParsePrefix(serviceIPRange)
	errNoDevice  = unix.ENODEV
)

// pidTag is this process id in base 36, the shortest unique stamp for
// interface names (15 characters at most).
var pidTag = strconv.FormatInt(int64(os.Getpid()), 36)

// VethOptions describe a veth pair between two namespaces.
type VethOptions struct {
	NS, PeerNS     *Netns // nil: the root namespace
	Name, PeerName string // default: pm<pid36>-<seq> and pm<pid36>_<seq>
	// Addr and PeerAddr ("198.19.1.0/31"), both given or both empty. Empty:
	// a free /31 from LinkRange, the even address on the NS side.
	Addr, PeerAddr string
	LinkRange      string // default DefaultLinkRange
	// Master puts the NS side on that bridge (see NewBridge), with no
	// address: PeerAddr is then required and Addr must be empty.
	Master string
}

// VethPair is a veth pair with its addresses, up on both sides.
type VethPair struct {
	Name, PeerName string
	NS, PeerNS     *Netns
	Addr, PeerAddr netip.Prefix
	block          netip.Prefix // allocated /31, released on Close
	master         string
	once           sync.Once
}

// Veth creates a veth pair for the test and deletes it when the test ends.
func Veth(tb testing.TB, opts VethOptions) *VethPair {
	tb.Helper()
	RequireRoot(tb)
	v, err := CreateVeth(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := v.Close(); err != nil {
			tb.Error(err)
		}
	})
	return v
}

// CreateVeth creates a veth pair; the caller must Close it.
func CreateVeth(opts VethOptions) (*VethPair, error) {
	n := nextSeq()
	v := &VethPair{NS: opts.NS, PeerNS: opts.PeerNS, Name: opts.Name, PeerName: opts.PeerName}
	if v.Name == "" {
		v.Name = "pm" + pidTag + "-" + strconv.FormatInt(n, 36)
	}
	if v.PeerName == "" {
		v.PeerName = "pm" + pidTag + "_" + strconv.FormatInt(n, 36)
	}
	var err error
	switch {
	case opts.Master != "":
		if opts.Addr != "" || opts.PeerAddr == "" {
			return nil, fmt.Errorf("veth %s on bridge %s: give PeerAddr only", v.Name, opts.Master)
		}
		if v.PeerAddr, err = netip.ParsePrefix(opts.PeerAddr); err != nil {
			return nil, fmt.Errorf("veth %s: %w", v.Name, err)
		}
		v.master = opts.Master
		err = v.create()
	case opts.Addr != "" && opts.PeerAddr != "":
		if v.Addr, err = netip.ParsePrefix(opts.Addr); err == nil {
			v.PeerAddr, err = netip.ParsePrefix(opts.PeerAddr)
		}
		if err != nil {
			return nil, fmt.Errorf("veth %s: %w", v.Name, err)
		}
		err = v.create()
	case opts.Addr == "" && opts.PeerAddr == "":
		err = withLinkBlock(opts.LinkRange, opts.NS == nil || opts.PeerNS == nil, func(block netip.Prefix) error {
			v.block = block
			v.Addr = netip.PrefixFrom(block.Addr(), 31)
			v.PeerAddr = netip.PrefixFrom(block.Addr().Next(), 31)
			return v.create()
		})
	default:
		err = fmt.Errorf("veth %s: give both Addr and PeerAddr or neither", v.Name)
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

func (v *VethPair) create() error {
	nl, err := v.NS.Netlink()
	if err != nil {
		return err
	}
	peerNL, err := v.PeerNS.Netlink()
	if err != nil {
		return err
	}
	link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: v.Name}, PeerName: v.PeerName}
	if v.PeerNS != v.NS {
		if v.PeerNS == nil {
			link.PeerNamespace = netlink.NsFd(int(initialNS))
		} else {
			link.PeerNamespace = netlink.NsFd(int(v.PeerNS.handle))
		}
	}
	if err := nl.LinkAdd(link); err != nil {
		return fmt.Errorf("veth %s (%s) <-> %s (%s): %w", v.Name, v.NS.name(), v.PeerName, v.PeerNS.name(), err)
	}
	if v.master != "" {
		br, err := nl.LinkByName(v.master)
		if err == nil {
			var l netlink.Link
			if l, err = nl.LinkByName(v.Name); err == nil {
				err = nl.LinkSetMaster(l, br)
			}
		}
		if err != nil {
			_ = v.deleteLink()
			return fmt.Errorf("veth %s on bridge %s: %w", v.Name, v.master, err)
		}
	}
	if err := configureLink(nl, v.Name, v.Addr); err != nil {
		_ = v.deleteLink()
		return fmt.Errorf("veth %s in %s: %w", v.Name, v.NS.name(), err)
	}
	if err := configureLink(peerNL, v.PeerName, v.PeerAddr); err != nil {
		_ = v.deleteLink()
		return fmt.Errorf("veth %s in %s: %w", v.PeerName, v.PeerNS.name(), err)
	}
	return nil
}

func configureLink(h *netlink.Handle, name string, addr netip.Prefix) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	if err := h.LinkSetAlias(l, linkAlias); err != nil {
		return fmt.Errorf("alias: %w", err)
	}
	if addr.IsValid() {
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(addr)}); err != nil {
			return fmt.Errorf("address %s: %w", addr, err)
		}
	}
	return h.LinkSetUp(l)
}

// Close deletes the pair (deleting one end removes both, with the routes
// through it).
func (v *VethPair) Close() error {
	var err error
	v.once.Do(func() {
		err = v.deleteLink()
		releaseLinkBlock(v.block)
	})
	return err
}

func (v *VethPair) deleteLink() error {
	nl, err := v.NS.Netlink()
	if errors.Is(err, errNetnsClosed) {
		return nil // went with its namespace
	}
	if err != nil {
		return err
	}
	l, err := nl.LinkByName(v.Name)
	if err != nil {
		if isNotFound(err) {
			return nil // gone with its namespace
		}
		return fmt.Errorf("veth %s: %w", v.Name, err)
	}
	if err := nl.LinkDel(l); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete veth %s: %w", v.Name, err)
	}
	return nil
}

// linkBlocks are the /31s this process holds; the root namespace's
// addresses tell what other processes hold.
var linkBlocks struct {
	mu   sync.Mutex
	used map[netip.Prefix]bool
}

// withLinkBlock finds a /31 in cidr used neither by this process nor by any
// root-namespace address, and calls assign with it while holding a
// cross-process lock, so that assign can put the address on a root-side link
// before another test binary looks. onRoot says whether one side is in root.
func withLinkBlock(cidr string, onRoot bool, assign func(netip.Prefix) error) error {
	if cidr == "" {
		cidr = DefaultLinkRange
	}
	pool, err := netip.ParsePrefix(cidr)
	if err != nil {
		return fmt.Errorf("link range: %w", err)
	}
	pool = pool.Masked()
	if !pool.Addr().Is4() || pool.Bits() > 31 || !linkSpace.Overlaps(pool) || pool.Bits() < linkSpace.Bits() {
		return fmt.Errorf("link range %s: must be an IPv4 range inside %s", cidr, linkSpace)
	}
	if pool.Overlaps(serviceSpace) {
		return fmt.Errorf("link range %s overlaps the API server's ClusterIP range %s", cidr, serviceSpace)
	}
	dir, err := stateDir()
	if err != nil {
		return err
	}
	lock, err := lockFile(filepath.Join(dir, "links.lock"))
	if err != nil {
		return err
	}
	defer lock.unlock()
	var taken []netip.Prefix
	if onRoot {
		if taken, err = rootPrefixes(); err != nil {
			return err
		}
	}
	linkBlocks.mu.Lock()
	defer linkBlocks.mu.Unlock()
	if linkBlocks.used == nil {
		linkBlocks.used = map[netip.Prefix]bool{}
	}
next:
	for a := pool.Addr(); pool.Contains(a); a = a.Next().Next() {
		block := netip.PrefixFrom(a, 31)
		if linkBlocks.used[block] {
			continue
		}
		for _, t := range taken {
			if t.Overlaps(block) {
				continue next
			}
		}
		if err := assign(block); err != nil {
			return err
		}
		linkBlocks.used[block] = true
		return nil
	}
	return fmt.Errorf("link range %s: no free /31 left", cidr)
}

func releaseLinkBlock(block netip.Prefix) {
	if !block.IsValid() {
		return
	}
	linkBlocks.mu.Lock()
	delete(linkBlocks.used, block)
	linkBlocks.mu.Unlock()
}

// rootPrefixes lists the IPv4 networks on root-namespace interfaces.
func rootPrefixes() ([]netip.Prefix, error) {
	h, err := rootNetlink()
	if err != nil {
		return nil, err
	}
	var addrs []netlink.Addr
	for i := 0; ; i++ {
		addrs, err = h.AddrList(nil, netlink.FAMILY_V4)
		if errors.Is(err, netlink.ErrDumpInterrupted) && i < 5 {
			continue
		}
		break
	}
	if err != nil {
		return nil, fmt.Errorf("list root addresses: %w", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if p, ok := netPrefix(a.IPNet); ok {
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func netPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

// Bridge is a Linux bridge: one L2 segment for several namespaces, as the
// nodes of a cluster share a network.
type Bridge struct {
	Name string
	NS   *Netns
	Addr netip.Prefix
}

// NewBridge creates a bridge in ns (nil: root) with addr on it, for the test.
func NewBridge(tb testing.TB, ns *Netns, name, addr string) *Bridge {
	tb.Helper()
	RequireRoot(tb)
	b, err := CreateBridge(ns, name, addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := b.Close(); err != nil {
			tb.Error(err)
		}
	})
	return b
}

// CreateBridge creates a bridge; the caller must Close it. In the root
// namespace it carries the test bed's alias, so a killed owner's bridge is
// swept like its veths.
func CreateBridge(ns *Netns, name, addr string) (*Bridge, error) {
	p, err := netip.ParsePrefix(addr)
	if err != nil {
		return nil, fmt.Errorf("bridge %s: %w", name, err)
	}
	nl, err := ns.Netlink()
	if err != nil {
		return nil, err
	}
	if err := nl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		return nil, fmt.Errorf("bridge %s in %s: %w", name, ns.name(), err)
	}
	b := &Bridge{Name: name, NS: ns, Addr: p}
	if err := configureLink(nl, name, p); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("bridge %s in %s: %w", name, ns.name(), err)
	}
	return b, nil
}

// Close deletes the bridge; its ports stay, detached.
func (b *Bridge) Close() error {
	nl, err := b.NS.Netlink()
	if errors.Is(err, errNetnsClosed) {
		return nil
	}
	if err != nil {
		return err
	}
	l, err := nl.LinkByName(b.Name)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("bridge %s: %w", b.Name, err)
	}
	if err := nl.LinkDel(l); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete bridge %s: %w", b.Name, err)
	}
	return nil
}
