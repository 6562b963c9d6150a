package egresspolicy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// stubResolver answers from a table; no packet leaves.
type stubResolver map[string][]netip.Addr

func (s stubResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if ips, ok := s[host]; ok {
		return ips, nil
	}
	return nil, errors.New("no such host")
}

// recorder is the dial hook: it records what would have been dialed and
// never opens a socket.
type recorder struct{ dialed []string }

func (r *recorder) dial(_ context.Context, _, addr string) (net.Conn, error) {
	r.dialed = append(r.dialed, addr)
	c, _ := net.Pipe()
	return c, nil
}

var names = stubResolver{
	"metadata.google.internal": {netip.MustParseAddr("169.254.169.254")},
	"intranet.example":         {netip.MustParseAddr("10.1.2.3")},
	"mixed.example":            {netip.MustParseAddr("192.168.1.1"), netip.MustParseAddr("93.184.216.34")},
	"public.example":           {netip.MustParseAddr("93.184.216.34")},
	"v6local.example":          {netip.MustParseAddr("fd00::1")},
	"mapped.example":           {netip.MustParseAddr("::ffff:127.0.0.1")},
}

// Every refused range is refused by default with no dial at all; names are
// resolved first and their addresses checked.
func TestDefaultRefusesInternalRangesWithoutDialing(t *testing.T) {
	for _, addr := range []string{
		"127.0.0.1:7000", "127.1.2.3:80", "[::1]:7000", "0.0.0.0:7000",
		"10.0.0.1:80", "172.16.5.4:80", "172.31.255.255:80", "192.168.0.1:80",
		"169.254.169.254:80", "100.64.0.1:80", "[fd00::1]:80", "[fc00::1]:80", "[fe80::1]:80",
		"[::ffff:10.0.0.1]:80", "[64:ff9b::a00:1]:80", "[2002:a00:1::]:80", "224.0.0.1:80",
		"metadata.google.internal:80", "intranet.example:443", "v6local.example:80", "mapped.example:80",
	} {
		r := &recorder{}
		d := &Dialer{Resolve: names, Dial: r.dial}
		_, err := d.DialContext(context.Background(), "tcp", addr)
		require.ErrorIs(t, err, ErrRefused, addr)
		require.Contains(t, err.Error(), "refused", addr)
		require.Empty(t, r.dialed, "%s: nothing may be dialed", addr)
	}
}

// Public addresses pass, by the address that was checked (no second lookup);
// a name with a private and a public address reaches only the public one.
func TestPublicAllowedAndDialedByCheckedAddress(t *testing.T) {
	r := &recorder{}
	d := &Dialer{Resolve: names, Dial: r.dial}
	for _, addr := range []string{"public.example:443", "mixed.example:443", "93.184.216.34:80", "[2606:4700::1]:443"} {
		c, err := d.DialContext(context.Background(), "tcp", addr)
		require.NoError(t, err, addr)
		c.Close()
	}
	require.Equal(t, []string{"93.184.216.34:443", "93.184.216.34:443", "93.184.216.34:80", "[2606:4700::1]:443"}, r.dialed)
}

// EGRESS_ALLOW opens exactly what it names: a CIDR any port, host:port one
// port, by name or by address.
func TestAllowList(t *testing.T) {
	p, err := Parse(" 10.1.0.0/16, 127.0.0.1:8080,intranet.example:443 ,[::1]:9000, 192.168.7.7")
	require.NoError(t, err)
	cases := map[string]bool{
		"10.1.9.9:22": true, "10.2.0.1:22": false,
		"127.0.0.1:8080": true, "127.0.0.1:8081": false, "localhost:8080": true, "localhost:8081": false,
		"intranet.example:443": true, "intranet.example:80": true, // 10.1.2.3 is in 10.1/16
		"[::1]:9000": true, "[::1]:9001": false,
		"192.168.7.7:1": true, "192.168.7.8:1": false,
	}
	res := stubResolver{"localhost": {netip.MustParseAddr("127.0.0.1")}, "intranet.example": names["intranet.example"]}
	for addr, ok := range cases {
		r := &recorder{}
		d := &Dialer{Policy: p, Resolve: res, Dial: r.dial}
		_, err := d.DialContext(context.Background(), "tcp", addr)
		if ok {
			require.NoError(t, err, addr)
			require.Len(t, r.dialed, 1, addr)
		} else {
			require.ErrorIs(t, err, ErrRefused, addr)
			require.Empty(t, r.dialed, addr)
		}
	}
	for _, bad := range []string{"nonsense", "10.0.0.0/33", "host:0", "host:99999", ":80"} {
		_, err := Parse(bad)
		require.Error(t, err, bad)
	}
}
