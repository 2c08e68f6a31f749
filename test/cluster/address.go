package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// AddLoopbackAddress puts ip on lo inside the cluster's network namespace
// (as ip/32, or ip/128 for IPv6), so that a server the test runs can listen
// on a pod's IP (Listen, or a process from Command) and the API server, and
// anything else in the namespace, reaches it there. The host does not see
// the address. Adding an address that is already there is not an error.
// It returns once connections to the address are delivered locally.
func (c *Cluster) AddLoopbackAddress(ip string) error {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return fmt.Errorf("adding a loopback address: %w", err)
	}
	addr = addr.Unmap()
	if addr.Zone() != "" || addr.IsUnspecified() || addr.IsMulticast() {
		return fmt.Errorf("adding a loopback address: %s is not a unicast address", ip)
	}
	err = c.ns.do(func() error {
		nl, err := openRtnetlink()
		if err != nil {
			return err
		}
		defer nl.close()
		if err := nl.addAddress("lo", addr); err != nil {
			return err
		}
		return nl.waitLocal(addr, 5*time.Second)
	})
	if err != nil {
		return fmt.Errorf("adding %s to lo in the cluster network namespace: %w", addr, err)
	}
	return nil
}

// rtnetlink is a route netlink socket of the calling thread's network
// namespace: what iproute2 uses, without needing iproute2.
type rtnetlink struct {
	fd  int
	seq uint32
}

func openRtnetlink() (*rtnetlink, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening rtnetlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding rtnetlink socket: %w", err)
	}
	return &rtnetlink{fd: fd}, nil
}

func (nl *rtnetlink) close() { unix.Close(nl.fd) }

// addrAttrs returns the family, prefix length and an attribute holding
// addr, as rtnetlink messages carry them.
func addrAttrs(typ uint16, addr netip.Addr) (family, bits int, attr []byte) {
	family, bits = unix.AF_INET, 32
	if addr.Is6() {
		family, bits = unix.AF_INET6, 128
	}
	raw := addr.AsSlice() // 4 or 16 bytes: no padding needed
	attr = make([]byte, unix.SizeofRtAttr+len(raw))
	binary.NativeEndian.PutUint16(attr[0:], uint16(len(attr)))
	binary.NativeEndian.PutUint16(attr[2:], typ)
	copy(attr[unix.SizeofRtAttr:], raw)
	return family, bits, attr
}

// request sends one message (header, body, then attributes) and returns
// the answers to it up to the acknowledgement or the error. An error answer
// is returned as its errno.
func (nl *rtnetlink) request(typ, flags uint16, body []byte, attrs ...[]byte) ([]syscall.NetlinkMessage, error) {
	nl.seq++
	msg := make([]byte, unix.SizeofNlMsghdr, 256)
	msg = append(msg, body...)
	for _, a := range attrs {
		msg = append(msg, a...)
	}
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], typ)
	ne.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(msg[8:], nl.seq)
	if err := unix.Sendto(nl.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sending rtnetlink request: %w", err)
	}
	var answers []syscall.NetlinkMessage
	for {
		buf := make([]byte, 64*1024) // the answers kept point into it
		n, _, err := unix.Recvfrom(nl.fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("reading rtnetlink answer: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("parsing rtnetlink answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != nl.seq {
				continue
			}
			if m.Header.Type != unix.NLMSG_ERROR {
				answers = append(answers, m)
				continue
			}
			// NLMSG_ERROR: a negative errno, or 0 for the acknowledgement.
			if len(m.Data) < 4 {
				return nil, errors.New("parsing rtnetlink answer: short error message")
			}
			if errno := unix.Errno(-int32(ne.Uint32(m.Data))); errno != 0 {
				return answers, errno
			}
			return answers, nil
		}
	}
}

// addAddress adds addr with a full-length prefix to the interface called
// name, as `ip addr add ADDR dev NAME` does. An address already there is
// fine.
func (nl *rtnetlink) addAddress(name string, addr netip.Addr) error {
	iface, err := net.InterfaceByName(name)
	if err != nil {
		return err
	}
	family, bits, local := addrAttrs(unix.IFA_LOCAL, addr)
	_, _, address := addrAttrs(unix.IFA_ADDRESS, addr)
	ifa := make([]byte, unix.SizeofIfAddrmsg)
	ifa[0] = byte(family)
	ifa[1] = byte(bits)
	ifa[2] = unix.IFA_F_NODAD | unix.IFA_F_PERMANENT // no duplicate address detection on lo
	ifa[3] = unix.RT_SCOPE_UNIVERSE                  // what `ip addr add` uses
	binary.NativeEndian.PutUint32(ifa[4:], uint32(iface.Index))
	_, err = nl.request(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, ifa, local, address)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("RTM_NEWADDR: %w", err)
	}
	return nil
}

// waitLocal waits until the route to addr is a local one, what `ip route
// get ADDR` shows as "local ADDR dev lo". An IPv4 address gets its local
// route at once; an IPv6 one only from the kernel's address configuration
// work a few milliseconds after the address was acknowledged, even without
// duplicate address detection. A connection made before that goes out on
// lo as to a remote host, is not taken and fails a second later with
// "network is unreachable".
func (nl *rtnetlink) waitLocal(addr netip.Addr, timeout time.Duration) error {
	family, bits, dst := addrAttrs(unix.RTA_DST, addr)
	rtm := make([]byte, unix.SizeofRtMsg)
	rtm[0] = byte(family)
	rtm[1] = byte(bits)
	deadline := time.Now().Add(timeout)
	for {
		answers, err := nl.request(unix.RTM_GETROUTE, 0, rtm, dst)
		var typ byte = unix.RTN_UNSPEC
		if err == nil && len(answers) > 0 && len(answers[0].Data) >= unix.SizeofRtMsg {
			typ = answers[0].Data[7] // rtm_type
		}
		if typ == unix.RTN_LOCAL {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("the route to %s is not a local one after %s (route type %d): %w", addr, timeout, typ, err)
			}
			return fmt.Errorf("the route to %s is not a local one after %s (route type %d)", addr, timeout, typ)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
