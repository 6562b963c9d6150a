package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared/egresspolicy"
)

// SOCKS reply codes the proxy answers a refusal with.
const (
	socksNotAllowed  = 2
	socksHostUnreach = 4
	socksRefused     = 5
)

// The real proxy, default policy: a loopback target (a live listener here)
// is refused and never sees a connection; with EGRESS_ALLOW naming it, the
// same target is reached.
func TestDirectRefusesLoopbackByDefault(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	host, port := splitPort(t, ln.Addr().String())

	p := newProxy(t, Options{Allow: egresspolicy.MustParse("")})
	for _, h := range []string{host, "localhost", "127.9.9.9"} {
		_, err := socksConnect(p.Addr().String(), h, port)
		var se *socksError
		require.True(t, errors.As(err, &se), "%s: %v", h, err)
		require.Contains(t, []byte{socksNotAllowed, socksHostUnreach, socksRefused}, se.code, h)
	}
	select {
	case <-accepted:
		t.Fatal("a refused destination received a connection")
	default:
	}

	allowed := newProxy(t, Options{Allow: egresspolicy.MustParse(ln.Addr().String())})
	c, err := socksConnect(allowed.Addr().String(), host, port)
	require.NoError(t, err)
	c.Close()
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the allowed destination was never reached")
	}
}

// Private, link-local, unique-local and CGNAT destinations, by address or
// by a name that resolves to one, are refused before any dial: the dial hook
// records nothing, and no packet goes anywhere (a resolver stub answers).
func TestDirectRefusesInternalRangesBeforeDialing(t *testing.T) {
	var mu sync.Mutex
	var dialed []string
	hook := func(_ context.Context, _, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		return nil, errors.New("the test's dial hook never connects")
	}
	names := stubNames{
		"metadata.google.internal": {netip.MustParseAddr("169.254.169.254")},
		"db.corp.example":          {netip.MustParseAddr("10.20.30.40")},
		"printer.lan":              {netip.MustParseAddr("fd12:3456::1")},
	}
	p := newProxy(t, Options{Allow: egresspolicy.MustParse(""), Dial: hook, Resolve: names})
	for _, target := range []struct {
		host string
		port int
	}{
		{"10.0.0.1", 80}, {"172.16.0.1", 80}, {"192.168.1.1", 80}, {"169.254.169.254", 80},
		{"100.64.0.1", 80}, {"fd00::1", 80}, {"fe80::1", 80}, {"0.0.0.0", 7000},
		{"metadata.google.internal", 80}, {"db.corp.example", 5432}, {"printer.lan", 631},
	} {
		_, err := socksConnect(p.Addr().String(), target.host, target.port)
		var se *socksError
		require.True(t, errors.As(err, &se), "%s: %v", target.host, err)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, dialed, "nothing may be dialed")
}

type stubNames map[string][]netip.Addr

func (s stubNames) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if ips, ok := s[host]; ok {
		return ips, nil
	}
	return nil, errors.New("no such host")
}
