package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared/testbin"
)

// firehose writes to every connection until the write fails, and counts
// the connections still being fed.
type firehose struct {
	ln     net.Listener
	active atomic.Int32
	wg     sync.WaitGroup
}

func newFirehose(t testing.TB) *firehose {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &firehose{ln: ln}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.active.Add(1)
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer f.active.Add(-1)
				defer c.Close()
				chunk := bytes.Repeat([]byte("0123456789abcdef"), 2048)
				for {
					_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); f.wg.Wait() })
	return f
}

// transfersEndWhenTheAgentDies starts n downloads, lets kill end the agent's
// side, and checks every download fails promptly (no hang, no clean EOF
// passing for a complete transfer) and every target connection ends.
func transfersEndWhenTheAgentDies(t *testing.T, proxy string, kill func()) {
	t.Helper()
	fh := newFirehose(t)
	_, port := splitPort(t, fh.ln.Addr().String())
	const n = 5
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c, err := socksConnect(proxy, "127.0.0.1", port)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.ReadFull(c, make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	results := make(chan error, n)
	for _, c := range conns {
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err := io.Copy(io.Discard, c)
			results <- err
		}()
	}
	kill()
	for i := 0; i < n; i++ {
		err := <-results
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("a transfer hung after the agent died")
		}
		if err == nil {
			t.Fatal("a cut transfer ended with a clean EOF")
		}
	}
	waitFor(t, 10*time.Second, "target connections to end", func() bool { return fh.active.Load() == 0 })
}

func TestAgentKilledMidTransferThenReconnects(t *testing.T) {
	leakCheck(t)
	s := newTunnelSetup(t, Options{}, nil)
	proxy := s.p.Addr().String()
	transfersEndWhenTheAgentDies(t, proxy, s.agent.sever)
	// The same agent reconnects by itself (backoff) and service is back.
	waitFor(t, 5*time.Second, "agent back online", func() bool { return s.p.Health().AgentOnline })
	echo := echoServer(t)
	_, port := splitPort(t, echo.Addr().String())
	c, err := socksConnect(proxy, "only-agent.test", port)
	if err != nil {
		t.Fatal(err)
	}
	echoRoundTrip(t, c, []byte("back"))
	c.Close()
}

func TestConcurrent200(t *testing.T) {
	for _, mode := range []string{ModeDirect, ModeTunnel} {
		t.Run(mode, func(t *testing.T) {
			leakCheck(t)
			var proxy string
			if mode == ModeTunnel {
				proxy = newTunnelSetup(t, Options{}, nil).p.Addr().String()
			} else {
				proxy = newProxy(t, Options{}).Addr().String()
			}
			echo := echoServer(t)
			_, port := splitPort(t, echo.Addr().String())
			const n = 200
			var (
				opened, done sync.WaitGroup
				open         atomic.Int32
				errs         = make(chan error, n)
			)
			opened.Add(n)
			done.Add(n)
			release := make(chan struct{})
			for i := 0; i < n; i++ {
				go func() {
					defer done.Done()
					c, err := socksConnect(proxy, "localhost", port)
					if err != nil {
						errs <- err
						opened.Done()
						return
					}
					defer c.Close()
					// Counted before opened.Done: counted after, a
					// loaded machine let opened.Wait return first, and
					// the check below then waited for an error that
					// never came (rehearsal 37: hung 19 minutes).
					open.Add(1)
					opened.Done()
					<-release // every connection is open at once
					msg := bytes.Repeat([]byte{byte(i)}, 64*1024)
					_ = c.SetDeadline(time.Now().Add(20 * time.Second))
					go func() { _, _ = c.Write(msg); _ = c.(*net.TCPConn).CloseWrite() }()
					got, err := io.ReadAll(c)
					if err != nil || !bytes.Equal(got, msg) {
						errs <- fmt.Errorf("conn %d: %v, %d bytes back", i, err, len(got))
					}
				}()
			}
			opened.Wait()
			if o := open.Load(); o != n {
				close(release)
				done.Wait()
				close(errs)
				t.Fatalf("only %d of %d connections opened: %v", o, n, <-errs)
			}
			close(release)
			done.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestWorkerBinaryKilled runs the real `worker egress` binary, SIGKILLs it
// mid-transfer and starts it again.
func TestWorkerBinaryKilled(t *testing.T) {
	testenv.RequireTools(t, "go")
	if testing.Short() && !testenv.CI() { // CI runs everything, -short or not
		t.Skip("builds the worker binary")
	}
	dir := t.TempDir()
	bin, err := testbin.GoBuild(filepath.Join(dir, "worker"), "github.com/open-bot/computer/apps/worker")
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, Options{Mode: ModeTunnel})
	ts := botdServer(t, p, nil, nil)
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "egress", "--botd", ts.URL, "--token-file", tokenFile, "--allow-loopback")
		cmd.Stderr = &syncBuf{}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		waitFor(t, 10*time.Second, "the worker's agent online", func() bool { return p.Health().AgentOnline })
		return cmd
	}
	cmd := start()
	if out := fmt.Sprint(cmd.Stderr); bytes.Contains([]byte(out), []byte(testToken)) {
		t.Fatalf("the agent logged its token: %s", out)
	}
	transfersEndWhenTheAgentDies(t, p.Addr().String(), func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	waitFor(t, 5*time.Second, "tunnel down", func() bool { return !p.Health().TunnelConnected })
	start()
	echo := echoServer(t)
	_, port := splitPort(t, echo.Addr().String())
	c, err := socksConnect(p.Addr().String(), "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	echoRoundTrip(t, c, []byte("restarted"))
	c.Close()
}

// resetServer sends a little and then resets the connection.
func resetServer(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("partial"))
			time.Sleep(50 * time.Millisecond)
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln
}

// A target's reset reaches the client as an error, in both modes (through
// the control stream in tunnel mode); a clean close (TestConcurrent200's
// half-closes) stays clean.
func TestTargetResetReachesClient(t *testing.T) {
	for _, mode := range []string{ModeDirect, ModeTunnel} {
		t.Run(mode, func(t *testing.T) {
			var proxy string
			if mode == ModeTunnel {
				proxy = newTunnelSetup(t, Options{}, nil).p.Addr().String()
			} else {
				proxy = newProxy(t, Options{}).Addr().String()
			}
			rs := resetServer(t)
			_, port := splitPort(t, rs.Addr().String())
			c, err := socksConnect(proxy, "127.0.0.1", port)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the connection outlived its target's reset")
			}
			if err == nil {
				t.Fatalf("clean EOF after %q; want the reset passed on", got)
			}
		})
	}
}

// streams is how many yamux streams the current agent session holds.
func (s *tunnelSetup) streams() int {
	s.p.tun.mu.Lock()
	defer s.p.tun.mu.Unlock()
	if s.p.tun.cur == nil {
		return -1
	}
	return s.p.tun.cur.sess.NumStreams()
}

// A client that resets mid-download frees the agent's target connection at
// once (not after yamux's close timeout), and no stream lingers.
func TestClientResetFreesTheAgentsTarget(t *testing.T) {
	leakCheck(t)
	s := newTunnelSetup(t, Options{}, nil)
	fh := newFirehose(t)
	_, port := splitPort(t, fh.ln.Addr().String())
	for i := 0; i < 5; i++ {
		c, err := socksConnect(s.p.Addr().String(), "127.0.0.1", port)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 256*1024)); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
	waitFor(t, 3*time.Second, "the agent's target connections to end", func() bool { return fh.active.Load() == 0 })
	waitFor(t, 3*time.Second, "only the control stream left", func() bool { return s.streams() == 1 })
}

// An agent whose websocket is up but who answers nothing (a laptop gone to
// sleep behind a live NAT) is connected but not online, and is dropped
// after two missed pings.
func TestSilentAgentIsNotOnlineAndIsDropped(t *testing.T) {
	p := newProxy(t, Options{Mode: ModeTunnel, PingInterval: 200 * time.Millisecond, PingTimeout: 300 * time.Millisecond})
	ts := botdServer(t, p, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, ts.URL+"/egress", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + testToken}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow() // never read: pings go unanswered
	waitFor(t, 5*time.Second, "tunnel connected", func() bool { return p.Health().TunnelConnected })
	if p.Health().AgentOnline {
		t.Fatal("a silent agent counts as online")
	}
	waitFor(t, 5*time.Second, "the silent agent dropped", func() bool { return !p.Health().TunnelConnected })
}
