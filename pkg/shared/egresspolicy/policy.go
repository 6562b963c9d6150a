// Package egresspolicy decides which destinations egress may reach: botd's
// SOCKS proxy in direct mode and the worker's egress agent apply the same
// rule. By default loopback, private (RFC 1918), link-local (cloud metadata
// included), unique-local, CGNAT, "this network", multicast and broadcast
// addresses are refused; an operator allows some with EGRESS_ALLOW
// (comma-separated CIDRs and host:port entries). The decision is made before
// any dial: a name is resolved first, every address checked, and only
// allowed addresses are dialed (by address, so nothing re-resolves between
// the check and the dial).
package egresspolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ErrRefused is wrapped by every refusal. Its text says "refused" so SOCKS
// servers answer "connection refused".
var ErrRefused = errors.New("egress refused by policy")

// denied are the ranges refused unless allowed.
var denied = []struct {
	p    netip.Prefix
	name string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "cgnat"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("192.0.0.0/24"), "ietf-special"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "unique-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	// NAT64 and 6to4 carry an IPv4 address: checked through it below.
}

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// Class names the refused range ip falls in, or "" when ip is public.
func Class(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64.Contains(ip):
			if c := Class(netip.AddrFrom4([4]byte(b[12:16]))); c != "" {
				return c
			}
		case sixTo4.Contains(ip):
			if c := Class(netip.AddrFrom4([4]byte(b[2:6]))); c != "" {
				return c
			}
		}
	}
	for _, d := range denied {
		if d.p.Contains(ip) {
			return d.name
		}
	}
	return ""
}

// Policy is what an operator allowed beyond the public internet. The zero
// value (and nil) allows nothing more.
type Policy struct {
	nets  []netip.Prefix
	hosts map[string]bool // "host:port", host lower-case (IPs in canonical form)
}

// Parse reads EGRESS_ALLOW: comma-separated CIDRs ("10.1.0.0/16", a bare IP
// is a /32 or /128) and host:port entries ("127.0.0.1:8080",
// "[::1]:8080", "intranet.example:443").
func Parse(s string) (*Policy, error) {
	p := &Policy{hosts: map[string]bool{}}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if pf, err := netip.ParsePrefix(e); err == nil {
			p.nets = append(p.nets, pf.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			p.nets = append(p.nets, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		host, port, err := net.SplitHostPort(e)
		if err != nil || host == "" {
			return nil, fmt.Errorf("EGRESS_ALLOW: %q is neither a CIDR nor host:port", e)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("EGRESS_ALLOW: %q: port must be 1..65535", e)
		}
		p.hosts[key(host, port)] = true
	}
	return p, nil
}

// MustParse is Parse for constants; it panics on a bad entry.
func MustParse(s string) *Policy {
	p, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return p
}

func key(host, port string) string {
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().WithZone("").String()
	}
	return net.JoinHostPort(strings.ToLower(strings.TrimSuffix(host, ".")), port)
}

// String lists the policy's entries (no secrets in it).
func (p *Policy) String() string {
	if p == nil {
		return ""
	}
	var out []string
	for _, n := range p.nets {
		out = append(out, n.String())
	}
	for h := range p.hosts {
		out = append(out, h)
	}
	return strings.Join(out, ",")
}

// Check decides about one address reached as name:port (name as the client
// gave it, an IP or a host name): nil when allowed, else an error wrapping
// ErrRefused that names the range.
func (p *Policy) Check(name string, ip netip.Addr, port string) error {
	c := Class(ip)
	if c == "" {
		return nil
	}
	if p != nil {
		u := ip.Unmap().WithZone("")
		for _, n := range p.nets {
			if n.Contains(u) {
				return nil
			}
		}
		if p.hosts[key(name, port)] || p.hosts[key(u.String(), port)] {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is %s (allow it with EGRESS_ALLOW)", ErrRefused, net.JoinHostPort(ip.String(), port), c)
}

// Resolver looks names up (net.DefaultResolver satisfies it).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer dials only what Policy allows.
type Dialer struct {
	Policy *Policy
	// Resolve looks names up (default net.DefaultResolver).
	Resolve Resolver
	// Dial reaches an allowed address, always given as ip:port.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// DialContext resolves addr's host, checks every address, and dials the
// allowed ones in order until one answers. When none is allowed nothing is
// dialed and the error wraps ErrRefused.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ips, host, port, err := d.resolve(ctx, addr)
	if err != nil {
		return nil, err
	}
	var firstRefusal, lastErr error
	for _, ip := range ips {
		if err := d.Policy.Check(host, ip, port); err != nil {
			if firstRefusal == nil {
				firstRefusal = err
			}
			continue
		}
		c, err := d.Dial(ctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return c, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	if lastErr != nil {
		return nil, lastErr
	}
	return nil, firstRefusal
}

// resolve splits addr and resolves its host (an IP literal is not looked
// up); it returns the addresses, the host as given and the port.
func (d *Dialer) resolve(ctx context.Context, addr string) ([]netip.Addr, string, string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", "", err
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.Unmap()}, host, port, nil
	}
	r := d.Resolve
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, "", "", err
	}
	if len(ips) == 0 {
		return nil, "", "", fmt.Errorf("%s: no address", host)
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, host, port, nil
}
