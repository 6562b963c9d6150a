package main

// Red-team rows for THREAT-MODEL rules 5 and 6 (links expire for real, every
// request has a deadline), hard links in the workspace, and the hostile
// filesystem state the issue lists. They run inside TestRedTeam.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// rtMaxConns is BOTD_MAX_CONNS for the red team's botd.
const rtMaxConns = 40

// rtRow is one attack of TestRedTeam.
type rtRow struct {
	name, position string
	attack         func(t *testing.T)
}

// modelProxyAddr is the model proxy's address, from Codex's config.
func (rt *redTeam) modelProxyAddr(t testing.TB) string {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join(rt.d.home, "bot", ".codex", "config.toml"))
	require.NoError(t, err)
	m := regexp.MustCompile(`http://(127\.0\.0\.1:\d+)/v1`).FindStringSubmatch(string(cfg))
	require.NotNil(t, m, "no model proxy URL in Codex's config")
	return m[1]
}

// screenPorts are screen id's view and control ports.
func (rt *redTeam) screenPorts(t testing.TB, id string) (view, control int) {
	t.Helper()
	list, body := rt.screens(t)
	for _, s := range list {
		if s.ID == id && s.Ports != nil {
			return s.Ports.View, s.Ports.Control
		}
	}
	t.Fatalf("screen %s has no ports: %s", id, body)
	return 0, 0
}

// waitClosed reads c until the server closes it; it fails when the server
// still holds it open after a minute (the server's timeouts are seconds).
func waitClosed(t testing.TB, c net.Conn, what string) []byte {
	t.Helper()
	b, _ := waitClosedErr(t, c, what)
	return b
}

func waitClosedErr(t testing.TB, c net.Conn, what string) ([]byte, error) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	b, err := io.ReadAll(c)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "%s: the server still holds the connection open", what)
	return b, err
}

// limitRows are the rule-6 rows: connection caps, header and handshake
// timeouts, bounded messages.
func (rt *redTeam) limitRows() []rtRow {
	return []rtRow{
		{"every listener caps connections and closes idle and slow ones", "network", func(t *testing.T) {
			view, control := rt.screenPorts(t, rt.screenID)
			apiUp := func() bool { s, _ := rt.call("GET", "/healthz", nil); return s == http.StatusOK }
			proxy := rt.modelProxyAddr(t)
			proxyUp := func() bool {
				resp, err := http.Get("http://" + proxy + "/v1/models")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusUnauthorized
			}
			portUp := func(port int) func() bool {
				return func() bool {
					resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
					if err != nil {
						return false
					}
					resp.Body.Close()
					return resp.StatusCode == http.StatusUnauthorized
				}
			}
			socksUp := func() bool {
				host, port, _ := net.SplitHostPort(strings.TrimPrefix(rt.page.URL, "http://"))
				p, _ := strconv.Atoi(port)
				c, err := net.DialTimeout("tcp", rt.socks, 5*time.Second)
				if err != nil {
					return false
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				req := append([]byte{5, 1, 0, 5, 1, 0, 1}, net.ParseIP(host).To4()...)
				if _, err := c.Write(binary.BigEndian.AppendUint16(req, uint16(p))); err != nil {
					return false
				}
				rep := make([]byte, 4)
				_, err = io.ReadFull(c, rep)
				return err == nil && rep[1] == 0 && rep[3] == 0
			}
			listeners := []struct {
				name, addr string
				http       bool
				up, other  func() bool // the listener itself; another one
			}{
				{"api", rt.d.addr, true, apiUp, proxyUp},
				{"view port", fmt.Sprintf("127.0.0.1:%d", view), true, portUp(view), apiUp},
				{"control port", fmt.Sprintf("127.0.0.1:%d", control), true, portUp(control), apiUp},
				{"model proxy", proxy, true, proxyUp, apiUp},
				{"socks", rt.socks, false, socksUp, apiUp},
			}
			for _, l := range listeners {
				require.True(t, l.up(), "%s does not serve before the attack", l.name)
				// More connections than the cap that send nothing (one
				// trickles a header a byte at a time; SOCKS ones send the
				// greeting and stop there).
				var held []net.Conn
				refused := 0
				for i := 0; i < rtMaxConns+5; i++ {
					c, err := net.DialTimeout("tcp", l.addr, 5*time.Second)
					if errors.Is(err, syscall.ECONNRESET) {
						refused++ // refused (reset) before the dial even returned
						continue
					}
					require.NoError(t, err, l.name)
					defer c.Close()
					if !l.http && i > 0 {
						// A connection refused past the cap may be reset already.
						_, _ = c.Write([]byte{5, 1, 0})
					}
					held = append(held, c)
				}
				trickle := make(chan error, 1)
				go func(c net.Conn) {
					msg := []byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 400))
					if !l.http {
						// A greeting, then a CONNECT whose name never ends.
						msg = append([]byte{5, 1, 0, 5, 1, 0, 3, 255}, bytes.Repeat([]byte{'a'}, 255)...)
					}
					for _, b := range msg {
						if _, err := c.Write([]byte{b}); err != nil {
							trickle <- err
							return
						}
						time.Sleep(200 * time.Millisecond)
					}
					trickle <- nil
				}(held[0])
				type end struct {
					got     []byte
					timeout bool
				}
				ends := make(chan end, len(held))
				for _, c := range held[1:] {
					go func(c net.Conn) {
						_ = c.SetReadDeadline(time.Now().Add(time.Minute))
						b, err := io.ReadAll(c)
						var ne net.Error
						ends <- end{b, errors.As(err, &ne) && ne.Timeout()}
					}(c)
				}
				// The other listeners serve while this one is full.
				require.True(t, l.other(), "another listener stopped serving while %s was full", l.name)
				// Past the cap a connection is refused at once (a 503, or
				// for SOCKS a close before any reply); the others are closed
				// by the server's header or handshake timeout.
				for range held[1:] {
					e := <-ends
					require.False(t, e.timeout, "%s holds an idle connection open", l.name)
					require.NotContains(t, string(e.got), `"ok"`)
					if (l.http && strings.HasPrefix(string(e.got), "HTTP/1.1 503")) || (!l.http && len(e.got) == 0) {
						refused++
					}
				}
				t.Logf("%s: %d of %d connections refused past the cap", l.name, refused, rtMaxConns+5)
				require.Positive(t, refused, "%s took %d connections: no cap", l.name, rtMaxConns+5)
				select {
				case err := <-trickle:
					require.Error(t, err, "%s read a header trickled over 80 s", l.name)
				case <-time.After(time.Minute):
					t.Fatalf("%s still reads a header trickled a byte at a time", l.name)
				}
				// And then it serves again.
				deadline := time.Now().Add(30 * time.Second)
				for !l.up() {
					require.True(t, time.Now().Before(deadline), "%s does not serve after the attack", l.name)
					time.Sleep(100 * time.Millisecond)
				}
			}
		}},
		{"oversized headers, bodies and websocket messages are refused", "network", func(t *testing.T) {
			auth := http.Header{"Authorization": {"Bearer " + rt.d.token}}
			// Headers.
			req, _ := http.NewRequest("GET", "http://"+rt.d.addr+"/healthz", nil)
			req.Header.Set("X-Big", strings.Repeat("h", 200<<10))
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
			// A JSON body.
			status, body := rt.call("POST", "/screens/"+rt.screenID+"/lease", map[string]any{"kind": "agent", "holder": strings.Repeat("x", 2<<20)})
			require.Equal(t, http.StatusRequestEntityTooLarge, status, string(body))
			// A JSON body trickled in: the handler is not held forever.
			c, err := net.Dial("tcp", rt.d.addr)
			require.NoError(t, err)
			defer c.Close()
			_, err = fmt.Fprintf(c, "POST /screens/%s/lease HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", rt.screenID, rt.d.token)
			require.NoError(t, err)
			got := waitClosed(t, c, "a body that never ends")
			require.True(t, strings.HasPrefix(string(got), "HTTP/1.1 4"), "%q", got)
			// Websockets: one message over each endpoint's limit.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, ws := range []struct {
				path string
				size int
				want []websocket.StatusCode
			}{
				// A client sends nothing on /events: any message closes it.
				{"/events", 1 << 20, []websocket.StatusCode{websocket.StatusPolicyViolation, websocket.StatusMessageTooBig}},
				{"/terminal", 2 << 20, []websocket.StatusCode{websocket.StatusMessageTooBig}},
				{"/agent", 65 << 20, []websocket.StatusCode{websocket.StatusMessageTooBig}},
			} {
				c, _, err := websocket.Dial(ctx, "ws://"+rt.d.addr+ws.path, &websocket.DialOptions{HTTPHeader: auth, Subprotocols: []string{"binary"}})
				require.NoError(t, err, ws.path)
				c.SetReadLimit(64 << 20)
				// The write may fail once botd closes: read meanwhile.
				go func(c *websocket.Conn, n int) { _ = c.Write(ctx, websocket.MessageBinary, make([]byte, n)) }(c, ws.size)
				var rerr error
				for rerr == nil {
					_, _, rerr = c.Read(ctx)
				}
				c.CloseNow()
				require.Contains(t, ws.want, websocket.CloseStatus(rerr), "%s: %v", ws.path, rerr)
			}
			// The RFB relay: after the handshake, one ClientCutText over the
			// relay's limit (refused as too big, or as bad RFB).
			vc, _, err := websocket.Dial(ctx, "ws://"+rt.d.addr+"/screens/"+rt.screenID+"/vnc", &websocket.DialOptions{HTTPHeader: auth, Subprotocols: []string{"binary"}})
			require.NoError(t, err)
			nc := websocket.NetConn(ctx, vc, websocket.MessageBinary)
			rfbGreet(t, nc)
			cut := make([]byte, 8+(3<<20))
			cut[0] = 6
			binary.BigEndian.PutUint32(cut[4:], 3<<20)
			go func() { _ = vc.Write(ctx, websocket.MessageBinary, cut) }()
			_, err = io.Copy(io.Discard, nc)
			vc.CloseNow()
			require.Contains(t, []websocket.StatusCode{websocket.StatusMessageTooBig, websocket.StatusPolicyViolation}, websocket.CloseStatus(err), "vnc: %v", err)
			// botd still serves.
			status, body = rt.call("GET", "/screens", nil)
			require.Equal(t, http.StatusOK, status, string(body))
		}},
	}
}

// rfbGreet does the viewer side of the RFB 3.8 handshake (security None, a
// shared session) over c and reads ServerInit.
func rfbGreet(t testing.TB, c net.Conn) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	ver := make([]byte, 12)
	_, err := io.ReadFull(c, ver)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(ver), "RFB "), "%q", ver)
	_, err = c.Write([]byte("RFB 003.008\n"))
	require.NoError(t, err)
	n := make([]byte, 1)
	_, err = io.ReadFull(c, n)
	require.NoError(t, err)
	types := make([]byte, n[0])
	_, err = io.ReadFull(c, types)
	require.NoError(t, err)
	require.Contains(t, string(types), "\x01")
	_, err = c.Write([]byte{1})
	require.NoError(t, err)
	res := make([]byte, 4)
	_, err = io.ReadFull(c, res)
	require.NoError(t, err)
	require.Zero(t, binary.BigEndian.Uint32(res))
	_, err = c.Write([]byte{1})
	require.NoError(t, err)
	si := make([]byte, 24)
	_, err = io.ReadFull(c, si)
	require.NoError(t, err)
	_, err = io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(si[20:24])))
	require.NoError(t, err)
}

// agentLease asks for the agent lease and returns the status (releasing a
// granted lease at once).
func (rt *redTeam) agentLease(t testing.TB) (int, string) {
	t.Helper()
	status, body := rt.call("POST", "/screens/"+rt.screenID+"/lease", map[string]any{"kind": "agent", "holder": "redteam"})
	if status == http.StatusOK {
		var l struct {
			LeaseID string `json:"leaseId"`
		}
		require.NoError(t, json.Unmarshal(body, &l))
		rt.call("DELETE", "/screens/"+rt.screenID+"/lease/"+l.LeaseID, nil)
	}
	return status, string(body)
}

// moreRows are the rule-5 row, the hard-link row and the hostile
// filesystem rows.
func (rt *redTeam) moreRows() []rtRow {
	home := rt.d.home
	return []rtRow{
		{"input on a control link never extends the lease past the link's expiry", "network", func(t *testing.T) {
			status, body := rt.call("POST", "/screens/"+rt.screenID+"/viewer-token", map[string]any{"mode": "control", "ttlSeconds": 4})
			require.Equal(t, http.StatusOK, status, string(body))
			var link struct {
				Token     string    `json:"token"`
				VNCPath   string    `json:"vncPath"`
				ExpiresAt time.Time `json:"expiresAt"`
			}
			require.NoError(t, json.Unmarshal(body, &link))
			// Take control with the link, as the viewer page does.
			req, _ := http.NewRequest("POST", "http://"+rt.d.addr+"/screens/"+rt.screenID+"/viewer-lease", nil)
			req.Header.Set("X-Viewer-Token", link.Token)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			var l struct {
				ExpiresAt time.Time `json:"expiresAt"`
			}
			require.NoError(t, json.Unmarshal(b, &l))
			require.False(t, l.ExpiresAt.After(link.ExpiresAt), "the lease (%v) outlives its link (%v)", l.ExpiresAt, link.ExpiresAt)
			status, lb := rt.agentLease(t)
			require.Equal(t, http.StatusConflict, status, "the agent took a screen a person controls: %s", lb)

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ws, _, err := websocket.Dial(ctx, "ws://"+rt.d.addr+link.VNCPath, &websocket.DialOptions{Subprotocols: []string{"binary"}})
			require.NoError(t, err)
			defer ws.CloseNow()
			nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
			rfbGreet(t, nc)
			// Input, continuously, until botd closes the connection.
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for x := 0; ; x++ {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := nc.Write([]byte{5, 0, 0, byte(x % 200), 0, 100}); err != nil {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
			_, err = io.Copy(io.Discard, nc)
			code := websocket.CloseStatus(err)
			require.Contains(t, []websocket.StatusCode{4003, 4005}, code, "the control connection ended with %v", err)
			require.False(t, time.Now().Before(link.ExpiresAt), "closed before the link expired")
			// The lease ended with the link: the agent takes the screen.
			status, lb = rt.agentLease(t)
			require.Equal(t, http.StatusOK, status, "the user lease outlived its link: %s", lb)
		}},
		{"a hard link to a file bot does not own is refused (kernel and file API)", "bot", func(t *testing.T) {
			secret := randomKey("hardlink-secret-")
			victim := filepath.Join(filepath.Dir(home), "root-secret")
			require.NoError(t, os.WriteFile(victim, []byte(secret), 0o644))
			ws := filepath.Join(home, "bot")
			// As bot: the kernel refuses the links (protected_hardlinks; the
			// jar's directory is not even searchable).
			for i, target := range []string{victim, filepath.Join(home, ".botd", "cookies.json")} {
				name := filepath.Join(ws, fmt.Sprintf("hl%d", i))
				code, out := asUser(t, "bot", "ln", target, name)
				if code == 0 {
					t.Logf("the kernel let bot link %s", target) // then the file API must refuse it
				} else {
					require.Regexp(t, "Operation not permitted|Permission denied", out)
				}
				status, body := rt.call("GET", "/files?path="+filepath.Base(name), nil)
				require.GreaterOrEqual(t, status, 400, "%s: %s", name, body)
				require.NotContains(t, string(body), secret)
			}
			// A link that root planted (the kernel does not stop root): the
			// file API refuses it all the same.
			planted := filepath.Join(ws, "planted")
			require.NoError(t, os.Link(victim, planted))
			defer os.Remove(planted)
			status, body := rt.call("GET", "/files?path=planted", nil)
			require.Equal(t, http.StatusForbidden, status, string(body))
			require.NotContains(t, string(body), secret)
			require.Contains(t, string(body), "hard link")
			// Control: bot's own hard-linked file reads.
			code, out := asUser(t, "bot", "sh", "-c", "echo mine > "+ws+"/own && ln "+ws+"/own "+ws+"/own2")
			require.Equal(t, 0, code, out)
			status, body = rt.call("GET", "/files?path=own2", nil)
			require.Equal(t, http.StatusOK, status, string(body))
		}},
		{"an X socket or a plain X lock bot planted is never used, and bot plants nothing in a runtime dir", "bot", func(t *testing.T) {
			sock := fmt.Sprintf("/tmp/.X11-unix/X%d", rtDisplayBase+1)
			lock := fmt.Sprintf("/tmp/.X%d-lock", rtDisplayBase+2)
			for _, p := range []string{sock, lock} {
				if _, err := os.Lstat(p); err == nil {
					t.Fatalf("%s exists before the attack", p)
				}
			}
			code, out := asUser(t, "bot", "python3", "-c", "import socket,sys\nsocket.socket(socket.AF_UNIX).bind(sys.argv[1])", sock)
			require.Equal(t, 0, code, out)
			defer os.Remove(sock)
			code, out = asUser(t, "bot", "sh", "-c", "echo garbage > "+lock)
			require.Equal(t, 0, code, out)
			defer os.Remove(lock)
			// A fake x11vnc socket (or anything else) in the screen's
			// runtime directory.
			code, out = asUser(t, "bot", "python3", "-c", "import socket,sys\nsocket.socket(socket.AF_UNIX).bind(sys.argv[1])",
				fmt.Sprintf("/run/botd-screens/%d/fake", rtDisplayBase))
			require.NotEqual(t, 0, code, "bot planted a socket in a screen's runtime directory: %s", out)
			defer rt.call("POST", "/screens/rt-sock/stop", nil)
			status, body := rt.call("POST", "/screens/rt-sock/start", nil)
			require.Equal(t, http.StatusOK, status, string(body))
			in := rt.screen(t, "rt-sock")
			require.NotNil(t, in.Slot)
			require.NotEqual(t, 1, *in.Slot, "the screen took the display whose socket bot planted")
			require.NotEqual(t, 2, *in.Slot, "the screen took the display whose lock bot planted")
			st, err := os.Lstat(sock)
			require.NoError(t, err)
			require.EqualValues(t, 60101, st.Sys().(*syscall.Stat_t).Uid, "the planted socket was replaced")
		}},
		{"an /exec child inherits no terminal's pty", "bot", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			term, _, err := websocket.Dial(ctx, "ws://"+rt.d.addr+"/terminal", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + rt.d.token}}})
			require.NoError(t, err)
			defer term.CloseNow()
			_, _, err = term.Read(ctx) // the shell is up
			require.NoError(t, err)
			status, body := rt.call("POST", "/exec", map[string]any{"argv": []string{"ls", "-l", "/proc/self/fd/"}})
			require.Equal(t, http.StatusOK, status, string(body))
			var res struct {
				ExitCode int    `json:"exitCode"`
				Stdout   string `json:"stdout"`
			}
			require.NoError(t, json.Unmarshal(body, &res))
			require.Equal(t, 0, res.ExitCode, string(body))
			require.Contains(t, res.Stdout, "0 -> ", "control: the listing names fds")
			require.NotContains(t, res.Stdout, "ptmx", "an /exec child holds a terminal's pty master")
			require.NotContains(t, res.Stdout, "/dev/pts", "an /exec child holds a pty")
		}},
		{"bot and desktop have fixed uids no host user shares", "bot", func(t *testing.T) {
			passwd, err := os.ReadFile("/etc/passwd")
			require.NoError(t, err)
			uids := map[string][]string{}
			for _, line := range strings.Split(string(passwd), "\n") {
				if f := strings.Split(line, ":"); len(f) > 3 {
					uids[f[2]] = append(uids[f[2]], f[0])
				}
			}
			for user, want := range map[string]string{"desktop": "60100", "bot": "60101"} {
				require.Equal(t, []string{user}, uids[want], "uid %s", want)
			}
		}},
	}
}
