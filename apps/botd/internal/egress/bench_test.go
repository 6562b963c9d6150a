package egress

import (
	"io"
	"net"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// serveTCP listens on a loopback port and runs handle on every connection
// in its own goroutine (handle closes it), until the benchmark ends.
func serveTCP(b testing.TB, handle func(net.Conn)) net.Listener {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	b.Cleanup(func() { ln.Close() })
	return ln
}

// sinkServer reads each connection to EOF, then answers one byte.
func sinkServer(b testing.TB) net.Listener {
	b.Helper()
	return serveTCP(b, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 256*1024)
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		_, _ = c.Write([]byte{1})
	})
}

// benchSetups returns a dialer per way of reaching a target: straight over
// loopback, and through the proxy in each mode.
func benchSetups(b *testing.B) map[string]func(host string, port int) (net.Conn, error) {
	direct := newProxy(b, Options{}).Addr().String()
	tunnel := newTunnelSetup(b, Options{}, nil).p.Addr().String()
	return map[string]func(string, int) (net.Conn, error){
		"loopback": func(host string, port int) (net.Conn, error) {
			return net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		},
		"direct": func(host string, port int) (net.Conn, error) { return socksConnect(direct, host, port) },
		"tunnel": func(host string, port int) (net.Conn, error) { return socksConnect(tunnel, host, port) },
	}
}

// send pushes total bytes through c in 256 KiB writes and waits for the
// sink's answer, so the clock stops when the last byte has arrived.
func send(b testing.TB, c net.Conn, total int64) {
	chunk := make([]byte, 256*1024)
	for sent := int64(0); sent < total; {
		n := min(int64(len(chunk)), total-sent)
		if _, err := c.Write(chunk[:n]); err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkThroughput moves bytes one way over one connection, straight
// over loopback and through the proxy in both modes, in the same run.
func BenchmarkThroughput(b *testing.B) {
	sink := sinkServer(b)
	_, port := splitPort(b, sink.Addr().String())
	setups := benchSetups(b)
	const chunk = 1 << 20
	for _, name := range []string{"loopback", "direct", "tunnel"} {
		b.Run(name, func(b *testing.B) {
			c, err := setups[name]("127.0.0.1", port)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.SetBytes(chunk)
			b.ResetTimer()
			send(b, c, int64(b.N)*chunk)
		})
	}
}

// sourceServer writes total bytes to each connection once it has read one
// byte from it, then closes it.
func sourceServer(b testing.TB, total int64) net.Listener {
	b.Helper()
	return serveTCP(b, func(c net.Conn) {
		defer c.Close()
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			return
		}
		chunk := make([]byte, 256*1024)
		for sent := int64(0); sent < total; {
			n := min(int64(len(chunk)), total-sent)
			if _, err := c.Write(chunk[:n]); err != nil {
				return
			}
			sent += n
		}
	})
}

// receive asks the source for its bytes over c and reads all total of them
// in 256 KiB reads.
func receive(b testing.TB, c net.Conn, total int64) {
	if _, err := c.Write([]byte{1}); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 256*1024)
	got := int64(0)
	for got < total {
		n, err := c.Read(buf)
		got += int64(n)
		if err != nil {
			break
		}
	}
	if got != total {
		b.Fatalf("received %d of %d bytes", got, total)
	}
}

// pairing is one measurement of BenchmarkThroughputRatio and
// BenchmarkRelayCeiling: every way of reaching the target moves the same
// bytes in turn, round after round, and each is compared with the plain
// loopback run of its own round.
type pairing struct {
	names  []string // names[0] is "loopback"
	took   map[string][]time.Duration
	cpu    map[string]time.Duration // least CPU (user+system, whole process)
	ratios map[string][]float64
}

func pairRounds(b *testing.B, names []string, rounds int, dial func(name string) (net.Conn, error), move func(net.Conn)) *pairing {
	pr := &pairing{names: names, took: map[string][]time.Duration{}, cpu: map[string]time.Duration{}, ratios: map[string][]float64{}}
	for round := 0; round < rounds; round++ {
		took := map[string]time.Duration{}
		for _, name := range names {
			c, err := dial(name)
			if err != nil {
				b.Fatal(err)
			}
			cpu0 := processCPU()
			start := time.Now()
			move(c)
			took[name] = time.Since(start)
			used := processCPU() - cpu0
			c.Close()
			pr.took[name] = append(pr.took[name], took[name])
			if pr.cpu[name] == 0 || used < pr.cpu[name] {
				pr.cpu[name] = used
			}
		}
		for _, name := range names[1:] {
			pr.ratios[name] = append(pr.ratios[name], took[names[0]].Seconds()/took[name].Seconds())
		}
	}
	return pr
}

func median[T float64 | time.Duration](v []T) T {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// BenchmarkThroughputRatio moves the same 128 MiB over plain loopback and
// through the proxy in each mode, in turn, for 15 rounds, in both
// directions: up (the client sends, as an upload does) and down (the
// target sends, as a page or a download does; through the tunnel that is
// the agent's masked websocket frames). It reports each way's median
// MB/s and, per mode and direction, the median over rounds of the ratio to
// the loopback run of the same round: pairing keeps a busy machine's noise
// from landing on one side only. CPU per byte (least of the rounds) is
// what a busy machine cannot blur. Run it with -benchtime 1x.
func BenchmarkThroughputRatio(b *testing.B) {
	const total = 128 << 20
	const rounds = 15
	sink := sinkServer(b)
	_, upPort := splitPort(b, sink.Addr().String())
	source := sourceServer(b, total)
	_, downPort := splitPort(b, source.Addr().String())
	setups := benchSetups(b)
	names := []string{"loopback", "direct", "tunnel"}
	mbps := func(d time.Duration) float64 { return float64(total) / d.Seconds() / 1e6 }
	for i := 0; i < b.N; i++ {
		for _, dir := range []struct {
			name string
			port int
			move func(net.Conn)
		}{
			{"up", upPort, func(c net.Conn) { send(b, c, total) }},
			{"down", downPort, func(c net.Conn) { receive(b, c, total) }},
		} {
			pr := pairRounds(b, names, rounds, func(name string) (net.Conn, error) {
				return setups[name]("127.0.0.1", dir.port)
			}, dir.move)
			for _, name := range names {
				b.ReportMetric(mbps(median(pr.took[name])), dir.name+"-"+name+"-MB/s")
				b.ReportMetric(float64(pr.cpu[name].Nanoseconds())/total, dir.name+"-"+name+"-cpu-ns/B")
			}
			for _, name := range names[1:] {
				b.ReportMetric(median(pr.ratios[name]), dir.name+"-"+name+"/loopback")
			}
		}
	}
	b.ReportMetric(0, "ns/op")
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkConnect is connection setup: dial, SOCKS handshake, CONNECT and
// one echoed byte, which proves the path is open end to end. The target is
// an IP literal, so the figure is the proxy's and not a resolver's. It
// reports the median and p99.
func BenchmarkConnect(b *testing.B) {
	echo := echoServer(b)
	_, port := splitPort(b, echo.Addr().String())
	setups := benchSetups(b)
	for _, name := range []string{"loopback", "direct", "tunnel"} {
		b.Run(name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			one := make([]byte, 1)
			for i := 0; i < b.N; i++ {
				start := time.Now()
				c, err := setups[name]("127.0.0.1", port)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Write(one); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, one); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				c.Close()
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// spliceRelay is the least a relay can do: accept, dial target, and splice
// both ways between the two raw TCP sockets. No SOCKS, no policy, no
// bookkeeping. It is the ceiling any proxy with one extra loopback hop can
// reach on this machine, not a part of the product.
func spliceRelay(b testing.TB, target string) string {
	b.Helper()
	return relay(b, target, bothWays(func(dst, src *net.TCPConn) {
		_, _ = dst.ReadFrom(src) // splice(2)
		_ = dst.CloseWrite()
	}))
}

// relay accepts, dials target, and hands both connections to serve.
func relay(b testing.TB, target string, serve func(client, target *net.TCPConn)) string {
	b.Helper()
	return serveTCP(b, func(c net.Conn) {
		defer c.Close()
		t, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer t.Close()
		serve(c.(*net.TCPConn), t.(*net.TCPConn))
	}).Addr().String()
}

// bothWays runs move in each direction and returns when both are done.
func bothWays(move func(dst, src *net.TCPConn)) func(client, target *net.TCPConn) {
	return func(c, t *net.TCPConn) {
		go move(t, c)
		move(c, t)
	}
}

// copyRelay is spliceRelay with the bytes pumped through user space (256
// KiB reads and writes) instead of spliced: what any relay that must look
// at or reframe the bytes, as both ends of a websocket tunnel do, costs at
// the least.
func copyRelay(b testing.TB, target string) string {
	b.Helper()
	return relay(b, target, bothWays(func(dst, src *net.TCPConn) {
		buf := make([]byte, 256*1024)
		_, _ = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
		_ = dst.CloseWrite()
	}))
}

// BenchmarkRelayCeiling pairs, as BenchmarkThroughputRatio does (up, 128
// MiB, 15 rounds), plain loopback with the proxy in each mode and with
// bare relays that do nothing but move bytes: one splice relay (splice:
// the most that direct mode, one extra hop, could reach here), one BPF
// sockmap relay where root may load it (sockmap: no user space at all
// between the two sockets), two splice relays in a row (splice2: three TCP
// connections, as tunnel mode has with botd and the agent relaying, but no
// framing or multiplexing), and one and two relays pumping through user
// space (copy, copy2: copy2 is the ceiling of any tunnel whose two ends
// read and write the bytes, as a websocket's must: the agent masks every
// frame it sends, RFC 6455 5.3, and botd unmasks it). The sink answers
// once all the bytes are in, so every setup is timed to the same point.
// Run it with -benchtime 1x.
func BenchmarkRelayCeiling(b *testing.B) {
	const total = 128 << 20
	const rounds = 15
	sink := countingSink(b, total)
	target := sink.Addr().String()
	_, port := splitPort(b, target)
	setups := benchSetups(b)
	for name, addr := range map[string]string{
		"splice":  spliceRelay(b, target),
		"splice2": spliceRelay(b, spliceRelay(b, target)),
		"copy":    copyRelay(b, target),
		"copy2":   copyRelay(b, copyRelay(b, target)),
	} {
		setups[name] = func(string, int) (net.Conn, error) { return net.Dial("tcp", addr) }
	}
	names := []string{"loopback", "splice", "sockmap", "copy", "direct", "splice2", "copy2", "tunnel"}
	if addr := sockmapRelay(b, target); addr != "" {
		setups["sockmap"] = func(string, int) (net.Conn, error) {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				_, err = io.ReadFull(c, make([]byte, 1)) // both sockets are in the map
			}
			return c, err
		}
	} else {
		names = slices.DeleteFunc(names, func(n string) bool { return n == "sockmap" })
	}
	for i := 0; i < b.N; i++ {
		pr := pairRounds(b, names, rounds, func(name string) (net.Conn, error) {
			return setups[name]("127.0.0.1", port)
		}, func(c net.Conn) { send(b, c, total) })
		for _, name := range names[1:] {
			b.ReportMetric(median(pr.ratios[name]), name+"/loopback")
		}
		for _, name := range names {
			b.ReportMetric(float64(pr.cpu[name].Nanoseconds())/total, name+"-cpu-ns/B")
		}
	}
	b.ReportMetric(0, "ns/op")
}
