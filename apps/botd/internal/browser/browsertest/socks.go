package browsertest

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/egress"
	"github.com/open-bot/computer/pkg/shared/egresspolicy"
)

// Socks is botd's own SOCKS proxy (egress.Proxy, direct mode) for browser
// tests: every name a browser asks for resolves (in a stub, no DNS) to its
// own loopback address, the proxy's policy allows loopback the way an
// operator's EGRESS_ALLOW would, and the dial reaches Backend, so a browser
// reaches a local test server under a real-looking host name
// (www.linkedin.com) through the real egress path.
type Socks struct {
	Addr    string
	Backend string

	// mu guards hosts, names and next.
	mu    sync.Mutex
	hosts []string
	names map[netip.Addr]string // the loopback address each name got
	ips   map[string]netip.Addr
	next  int
}

// Allow is the EGRESS_ALLOW of the tests' proxy: loopback, where the stub
// resolver puts every name.
const Allow = "127.0.0.0/8"

// StartSocks starts botd's egress proxy on 127.0.0.1 until the test ends.
func StartSocks(t testing.TB, backend string) *Socks {
	t.Helper()
	s := &Socks{Backend: backend, names: map[netip.Addr]string{}, ips: map[string]netip.Addr{}}
	p, err := egress.New(egress.Options{
		Addr:    "127.0.0.1:0",
		Allow:   egresspolicy.MustParse(Allow),
		Resolve: s,
		Dial:    s.dial,
		Log:     zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	s.Addr = p.Addr().String()
	return s
}

// LookupNetIP gives every name its own address in 127.1.0.0/16.
func (s *Socks) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ip, ok := s.ips[host]
	if !ok {
		s.next++
		ip = netip.AddrFrom4([4]byte{127, 1, byte(s.next >> 8), byte(s.next)})
		s.ips[host], s.names[ip] = ip, host
	}
	return []netip.Addr{ip}, nil
}

// dial is reached only with an address the policy allowed; it records the
// name (or the address) and port, and connects to Backend.
func (s *Socks) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	s.mu.Lock()
	host := ap.Addr().String()
	if n, ok := s.names[ap.Addr()]; ok {
		host = n
	}
	s.hosts = append(s.hosts, net.JoinHostPort(host, fmt.Sprint(ap.Port())))
	s.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, s.Backend)
}

// Hosts are the host:port targets browsers asked for, in order.
func (s *Socks) Hosts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.hosts...)
}
