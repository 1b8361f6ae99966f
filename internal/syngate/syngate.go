// Package syngate drops the TCP SYNs that open new connections to the
// ingress addresses while an edge drains (docs/ha.md).
//
// A draining edge that answered a SYN would own a connection the router
// may move to another edge a moment later, which resets it. Dropped instead,
// the SYN is sent again by the client's kernel about a second later, when
// the router forwards it to an edge that stays. Established connections and
// every other packet pass.
//
// The gate is a classic BPF program in a cls_bpf filter (direct action) on
// the clsact ingress hook of every interface but lo, installed over netlink:
// it needs CAP_NET_ADMIN only, neither the bpf() system call nor a tc action
// module.
package syngate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Our filter is the cls_bpf filter with this priority and handle on the
// ingress hook: the one a stop removes, or a start finds left by a daemon
// that died while draining. (The kernel keeps no name for a classic
// program.) Priority 1 puts it ahead of filters an operator may have
// there, which never see the dropped SYNs.
const (
	priority = 1
	handle   = 0x5e7a // "gate"
)

// Verdicts of a cls_bpf filter in direct-action mode.
const (
	actOK   = 0 // TC_ACT_OK
	actShot = 2 // TC_ACT_SHOT
)

// skfNetOff makes a load relative to the network header. cls_bpf runs
// programs on the ingress hook with the data pushed back to the link-layer
// header, whose length depends on the interface (none on a tunnel); the
// network-relative loads read the same bytes on every kind.
const skfNetOff = 0xfff00000 // SKF_NET_OFF, -0x100000

// Program returns the filter: a TCP segment with SYN set and ACK clear,
// addressed to one of addrs, is dropped; everything else passes. IPv4
// fragments after the first and IPv6 packets with extension headers before
// TCP pass (a SYN carries neither in practice).
func Program(addrs []netip.Addr) ([]bpf.RawInstruction, error) {
	var v4, v6 []netip.Addr
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			v4 = append(v4, a)
		} else if a.Is6() {
			v6 = append(v6, a)
		}
	}
	if len(v4)+len(v6) == 0 {
		return nil, errors.New("no address to gate")
	}
	var p asm
	p.add(bpf.LoadExtension{Num: bpf.ExtProto})
	p.jumpEq(unix.ETH_P_IP, "v4", "")
	p.jumpEq(unix.ETH_P_IPV6, "v6", "pass")

	p.label("v4")
	p.add(bpf.LoadAbsolute{Off: skfNetOff + 9, Size: 1})
	p.jumpEq(unix.IPPROTO_TCP, "", "pass")
	p.add(bpf.LoadAbsolute{Off: skfNetOff + 6, Size: 2})
	p.jumpSet(0x1fff, "pass", "") // fragment offset
	p.add(bpf.LoadAbsolute{Off: skfNetOff + 16, Size: 4})
	for _, a := range v4 {
		p.jumpEq(binary.BigEndian.Uint32(a.AsSlice()), "v4tcp", "")
	}
	p.jump("pass")
	p.label("v4tcp")
	// X = the IPv4 header's length, where TCP starts.
	p.add(bpf.LoadAbsolute{Off: skfNetOff, Size: 1})
	p.add(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x0f})
	p.add(bpf.ALUOpConstant{Op: bpf.ALUOpShiftLeft, Val: 2})
	p.add(bpf.TAX{})
	p.add(bpf.LoadIndirect{Off: skfNetOff + 13, Size: 1})
	p.jump("flags")

	p.label("v6")
	p.add(bpf.LoadAbsolute{Off: skfNetOff + 6, Size: 1})
	p.jumpEq(unix.IPPROTO_TCP, "", "pass")
	for i, a := range v6 {
		b := a.AsSlice()
		next := fmt.Sprintf("v6next%d", i)
		for w := 0; w < 4; w++ {
			p.add(bpf.LoadAbsolute{Off: skfNetOff + 24 + uint32(4*w), Size: 4})
			p.jumpEq(binary.BigEndian.Uint32(b[4*w:]), "", next)
		}
		p.jump("v6tcp")
		p.label(next)
	}
	p.jump("pass")
	p.label("v6tcp")
	p.add(bpf.LoadAbsolute{Off: skfNetOff + 40 + 13, Size: 1})

	p.label("flags")
	p.add(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x12}) // SYN|ACK
	p.jumpEq(0x02, "", "pass")                            // SYN alone
	p.add(bpf.RetConstant{Val: actShot})
	p.label("pass")
	p.add(bpf.RetConstant{Val: actOK})
	ins, err := p.resolve()
	if err != nil {
		return nil, err
	}
	return bpf.Assemble(ins)
}

// asm is a classic BPF program with symbolic jump targets ("" = the next
// instruction).
type asm struct {
	ins    []bpf.Instruction
	jumps  map[int][2]string
	labels map[string]int
}

func (p *asm) add(i bpf.Instruction) { p.ins = append(p.ins, i) }

func (p *asm) label(l string) {
	if p.labels == nil {
		p.labels = map[string]int{}
	}
	p.labels[l] = len(p.ins)
}

func (p *asm) cond(c bpf.JumpTest, v uint32, t, f string) {
	if p.jumps == nil {
		p.jumps = map[int][2]string{}
	}
	p.jumps[len(p.ins)] = [2]string{t, f}
	p.add(bpf.JumpIf{Cond: c, Val: v})
}

func (p *asm) jumpEq(v uint32, t, f string)  { p.cond(bpf.JumpEqual, v, t, f) }
func (p *asm) jumpSet(v uint32, t, f string) { p.cond(bpf.JumpBitsSet, v, t, f) }

func (p *asm) jump(l string) {
	if p.jumps == nil {
		p.jumps = map[int][2]string{}
	}
	p.jumps[len(p.ins)] = [2]string{l}
	p.add(bpf.Jump{})
}

func (p *asm) resolve() ([]bpf.Instruction, error) {
	skip := func(from int, l string) (uint8, error) {
		if l == "" {
			return 0, nil
		}
		to, ok := p.labels[l]
		if !ok || to <= from || to-from-1 > 255 {
			return 0, fmt.Errorf("bpf: bad jump from %d to %q", from, l)
		}
		return uint8(to - from - 1), nil
	}
	out := append([]bpf.Instruction(nil), p.ins...)
	for at, t := range p.jumps {
		switch i := out[at].(type) {
		case bpf.JumpIf:
			var err error
			if i.SkipTrue, err = skip(at, t[0]); err != nil {
				return nil, err
			}
			if i.SkipFalse, err = skip(at, t[1]); err != nil {
				return nil, err
			}
			out[at] = i
		case bpf.Jump:
			to, ok := p.labels[t[0]]
			if !ok || to <= at {
				return nil, fmt.Errorf("bpf: bad jump from %d to %q", at, t[0])
			}
			out[at] = bpf.Jump{Skip: uint32(to - at - 1)}
		}
	}
	return out, nil
}

// Prepare adds the clsact qdisc the gate hangs on to every interface but
// lo that lacks it. Adding a qdisc deactivates the interface for a moment,
// dropping the packets it sends meanwhile (a handshake's SYN-ACK, a
// response); done when the daemon starts, before the edge announces, the
// drain only adds a filter, which does not. A hand-over restart finds the
// qdiscs in place and adds none.
func Prepare() ([]string, error) {
	var added []string
	err := eachLink(func(l netlink.Link) error {
		ok, err := clsact(l)
		if ok {
			added = append(added, l.Attrs().Name)
		}
		return err
	})
	return added, err
}

// Close installs the gate for addrs on the ingress of every interface but
// lo (the daemon's own probes and local clients use lo, and no router
// moves their flows). Every interface rather than those towards the
// upstream peers: a router may reach the edge over any of its links, and
// which ones may change while the edge drains. On an error the interfaces
// already gated stay gated; Open removes them.
func Close(addrs []netip.Addr) (links []string, err error) {
	prog, err := Program(addrs)
	if err != nil {
		return nil, err
	}
	err = eachLink(func(l netlink.Link) error {
		if _, err := clsact(l); err != nil {
			return err
		}
		if err := addFilter(l.Attrs().Index, prog); err != nil {
			return fmt.Errorf("filter: %w", err)
		}
		links = append(links, l.Attrs().Name)
		return nil
	})
	return links, err
}

// eachLink runs fn on every interface but lo.
func eachLink(fn func(netlink.Link) error) error {
	all, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, l := range all {
		if l.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		if err := fn(l); err != nil {
			return fmt.Errorf("%s: %w", l.Attrs().Name, err)
		}
	}
	return nil
}

// clsact adds the clsact qdisc unless the link has it, and says whether it
// did.
func clsact(l netlink.Link) (bool, error) {
	qs, err := netlink.QdiscList(l)
	if err != nil {
		return false, fmt.Errorf("qdiscs: %w", err)
	}
	for _, q := range qs {
		if q.Type() == "clsact" {
			return false, nil
		}
	}
	err = netlink.QdiscAdd(&netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	})
	if err != nil {
		return false, fmt.Errorf("add clsact: %w", err)
	}
	return true, nil
}

// addFilter attaches the classic program. netlink.BpfFilter takes only an
// eBPF file descriptor, so the message carries the instructions itself
// (TCA_BPF_OPS, as `tc filter ... bpf bytecode` sends them).
func addFilter(ifindex int, prog []bpf.RawInstruction) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{
		Family:  nl.FAMILY_ALL,
		Ifindex: int32(ifindex),
		Handle:  handle,
		Parent:  netlink.HANDLE_MIN_INGRESS,
		Info:    netlink.MakeHandle(priority, nl.Swap16(unix.ETH_P_ALL)),
	})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("bpf")))
	opts := nl.NewRtAttr(nl.TCA_OPTIONS, nil)
	opts.AddRtAttr(nl.TCA_BPF_OPS_LEN, nl.Uint16Attr(uint16(len(prog))))
	opts.AddRtAttr(nl.TCA_BPF_OPS, sockFilters(prog))
	opts.AddRtAttr(nl.TCA_BPF_FLAGS, nl.Uint32Attr(nl.TCA_BPF_FLAG_ACT_DIRECT))
	req.AddData(opts)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// sockFilters lays the program out as struct sock_filter[] (host order).
func sockFilters(prog []bpf.RawInstruction) []byte {
	var b []byte
	for _, r := range prog {
		b = binary.NativeEndian.AppendUint16(b, r.Op)
		b = append(b, r.Jt, r.Jf)
		b = binary.NativeEndian.AppendUint32(b, r.K)
	}
	return b
}

// Open removes our filters from every interface (also those a daemon that
// died while draining left) and returns the interfaces it opened. The
// clsact qdisc stays: other filters may use it, and empty it costs nothing.
func Open() ([]string, error) {
	var opened []string
	var errs []error
	err := eachGate(func(l netlink.Link, f netlink.Filter) {
		if err := netlink.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("%s: %w", l.Attrs().Name, err))
			return
		}
		opened = append(opened, l.Attrs().Name)
	})
	return opened, errors.Join(append(errs, err)...)
}

// Closed lists the interfaces on which the gate is closed.
func Closed() ([]string, error) {
	var closed []string
	err := eachGate(func(l netlink.Link, _ netlink.Filter) { closed = append(closed, l.Attrs().Name) })
	return closed, err
}

// eachGate runs fn on each of our filters.
func eachGate(fn func(netlink.Link, netlink.Filter)) error {
	all, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, l := range all {
		fs, err := netlink.FilterList(l, netlink.HANDLE_MIN_INGRESS)
		if err != nil {
			// No clsact qdisc: nothing of ours.
			continue
		}
		for _, f := range fs {
			if a := f.Attrs(); f.Type() == "bpf" && a.Handle == handle && a.Priority == priority {
				fn(l, f)
			}
		}
	}
	return nil
}
