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

// sinkServer reads each connection to EOF, then answers one byte.
func sinkServer(b testing.TB) net.Listener {
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
			go func() {
				defer c.Close()
				buf := make([]byte, 256*1024)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				_, _ = c.Write([]byte{1})
			}()
		}
	}()
	b.Cleanup(func() { ln.Close() })
	return ln
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

// BenchmarkThroughputRatio times the same 64 MiB over loopback and through
// the proxy in each mode, back to back, for ten rounds. It reports the best
// throughput of each and, per mode, the median over rounds of the ratio to
// the loopback run next to it: pairing runs keeps a busy machine's noise
// from landing on one side only. Run it with -benchtime 1x.
func BenchmarkThroughputRatio(b *testing.B) {
	sink := sinkServer(b)
	_, port := splitPort(b, sink.Addr().String())
	setups := benchSetups(b)
	const total = 64 << 20
	const rounds = 10
	best := map[string]time.Duration{}
	cpu := map[string]time.Duration{} // least CPU (user+system, whole process) per run
	ratios := map[string][]float64{}
	for i := 0; i < b.N; i++ {
		for round := 0; round < rounds; round++ {
			took := map[string]time.Duration{}
			for _, name := range []string{"loopback", "direct", "tunnel"} {
				c, err := setups[name]("127.0.0.1", port)
				if err != nil {
					b.Fatal(err)
				}
				cpu0 := processCPU()
				start := time.Now()
				send(b, c, total)
				took[name] = time.Since(start)
				used := processCPU() - cpu0
				c.Close()
				if best[name] == 0 || took[name] < best[name] {
					best[name] = took[name]
				}
				if cpu[name] == 0 || used < cpu[name] {
					cpu[name] = used
				}
			}
			for _, name := range []string{"direct", "tunnel"} {
				ratios[name] = append(ratios[name], took["loopback"].Seconds()/took[name].Seconds())
			}
		}
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	mbps := func(d time.Duration) float64 { return float64(total) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(best["loopback"]), "loopback-MB/s")
	b.ReportMetric(mbps(best["direct"]), "direct-MB/s")
	b.ReportMetric(mbps(best["tunnel"]), "tunnel-MB/s")
	b.ReportMetric(median(ratios["direct"]), "direct/loopback")
	b.ReportMetric(median(ratios["tunnel"]), "tunnel/loopback")
	// CPU per byte is what a busy machine cannot blur.
	for _, name := range []string{"loopback", "direct", "tunnel"} {
		b.ReportMetric(float64(cpu[name].Nanoseconds())/total, name+"-cpu-ns/B")
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
			go func() {
				defer c.Close()
				t, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer t.Close()
				go func() {
					_, _ = t.(*net.TCPConn).ReadFrom(c)
					_ = t.(*net.TCPConn).CloseWrite()
				}()
				_, _ = c.(*net.TCPConn).ReadFrom(t)
			}()
		}
	}()
	b.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// BenchmarkRelayCeiling pairs, as BenchmarkThroughputRatio does, plain
// loopback with the proxy in each mode and with bare splice relays: one
// (splice: the most direct mode, one extra hop, could reach here) and two
// in a row (splice2: three TCP connections, as tunnel mode has with botd
// and the agent relaying, but no framing or multiplexing: its ceiling).
// Run it with -benchtime 1x.
func BenchmarkRelayCeiling(b *testing.B) {
	sink := sinkServer(b)
	_, port := splitPort(b, sink.Addr().String())
	setups := benchSetups(b)
	relay := spliceRelay(b, sink.Addr().String())
	setups["splice"] = func(string, int) (net.Conn, error) { return net.Dial("tcp", relay) }
	relay2 := spliceRelay(b, spliceRelay(b, sink.Addr().String()))
	setups["splice2"] = func(string, int) (net.Conn, error) { return net.Dial("tcp", relay2) }
	const total = 64 << 20
	const rounds = 10
	ratios := map[string][]float64{}
	cpu := map[string]time.Duration{}
	for i := 0; i < b.N; i++ {
		for round := 0; round < rounds; round++ {
			took := map[string]time.Duration{}
			for _, name := range []string{"loopback", "splice", "direct", "splice2", "tunnel"} {
				c, err := setups[name]("127.0.0.1", port)
				if err != nil {
					b.Fatal(err)
				}
				cpu0 := processCPU()
				start := time.Now()
				send(b, c, total)
				took[name] = time.Since(start)
				used := processCPU() - cpu0
				c.Close()
				if cpu[name] == 0 || used < cpu[name] {
					cpu[name] = used
				}
			}
			for _, name := range []string{"splice", "direct", "splice2", "tunnel"} {
				ratios[name] = append(ratios[name], took["loopback"].Seconds()/took[name].Seconds())
			}
		}
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	for _, name := range []string{"splice", "direct", "splice2", "tunnel"} {
		b.ReportMetric(median(ratios[name]), name+"/loopback")
	}
	for _, name := range []string{"loopback", "splice", "direct", "splice2", "tunnel"} {
		b.ReportMetric(float64(cpu[name].Nanoseconds())/total, name+"-cpu-ns/B")
	}
	b.ReportMetric(0, "ns/op")
}
