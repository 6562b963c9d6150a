package main

// Red team, position "another local user or process on the worker's host"
// (THREAT-MODEL.md rule 2; issue 36, row 3): the worker reached a vendor
// sandbox's ports (botd, a stock desktop's VNC/websockify) through a
// reverse proxy listening on 127.0.0.1:<random> that added the vendor's
// routing credential to whatever connected. After a takeover of an E2B
// stock-desktop computer, any local client could open that port, complete
// the RFB handshake (security None) and send keys, and it still could
// after the takeover was released. The worker must keep no loopback TCP
// listener that reaches a sandbox without authentication: a person's
// control goes only through the worker's capability-checked relay, which
// closes the connection when the grant ends.

import (
	"bufio"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
)

// loopbackListeners are this process's listening TCP sockets on the
// loopback range ("127.0.0.1:PORT"), from /proc/self/net/tcp{,6} matched to
// the socket inodes among /proc/self/fd.
func loopbackListeners(t testing.TB) []string {
	t.Helper()
	mine := map[string]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Scan() // header
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != "0A" || !mine[fs[9]] { // 0A: LISTEN
				continue
			}
			hostPort := strings.SplitN(fs[1], ":", 2)
			port, _ := strconv.ParseUint(hostPort[1], 16, 16)
			raw, _ := hex.DecodeString(hostPort[0])
			var ip net.IP
			switch len(raw) {
			case 4: // little-endian
				ip = net.IPv4(raw[3], raw[2], raw[1], raw[0])
			case 16:
				ip = make(net.IP, 16)
				for i := 0; i < 16; i += 4 {
					ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
				}
			default:
				continue
			}
			if !ip.IsLoopback() {
				continue
			}
			out = append(out, net.JoinHostPort(ip.String(), strconv.Itoa(int(port))))
		}
		fh.Close()
	}
	return out
}

// hostOf is the host:port of a URL.
func hostOf(t testing.TB, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	require.NoError(t, err)
	return p.Host
}

// rfbThroughLoopback tries, as a local client with no credential, every
// loopback listener of this process but skip (the worker's own API port
// and the vendor emulator's): GET / (a listener that does not answer 401
// is unauthenticated), then a websocket to /websockify, the RFB version and
// security None, ClientInit, ServerInit. It returns the listeners that
// handed out the desktop, those that answered without authentication, and
// all it tried.
func rfbThroughLoopback(t testing.TB, skip map[string]bool) (reached, unauthenticated, listeners []string) {
	t.Helper()
	for _, addr := range loopbackListeners(t) {
		if skip[addr] {
			continue
		}
		listeners = append(listeners, addr)
		if resp, err := http.Get("http://" + addr + "/"); err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 80))
			resp.Body.Close()
			t.Logf("loopback listener %s: an unauthenticated GET / answers %d %q", addr, resp.StatusCode, b)
			if resp.StatusCode != http.StatusUnauthorized {
				unauthenticated = append(unauthenticated, addr)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := dialRFB(ctx, "ws://"+addr+"/websockify")
		cancel()
		if err != nil {
			continue
		}
		if err := c.handshake(); err == nil {
			reached = append(reached, addr)
		}
		c.Close()
	}
	return reached, unauthenticated, listeners
}

// TestRedteamForwarder: a takeover of an E2B stock-desktop computer, then
// a local client with no credential tries every loopback listener of the
// worker's process (but its API port and the emulator's) for the
// desktop's RFB, while control is held and after its release. No row may
// reach the desktop; the person's control through the worker's link works
// and is closed by the release.
func TestRedteamForwarder(t *testing.T) {
	emu := bothTemplates(t)
	dir := openDir(t, "wire-rtfwd-")
	e := templateWorker(t, e2bEnv(emu, nil), filepath.Join(dir, "machines"))
	const bot = "alice"
	status, cc, c := createComputer(t, e, map[string]any{"scope": map[string]string{"team": "rtfwd"}, "template": e2b.DesktopTemplate})
	require.Equal(t, 201, status, "%+v", cc.Error)
	require.Equal(t, "running", cc.Computer.State, cc.Computer.LastError)
	require.Equal(t, 201, c.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))

	status, link, msg := takeoverCall(t, c, "POST", bot, "")
	require.Equal(t, 200, status, msg)
	rfb := connectControl(t, link.URL) // the person's control, through the worker
	skip := map[string]bool{hostOf(t, e.url): true, hostOf(t, emu.URL): true, hostOf(t, emu.ProxyURL): true}

	for _, row := range []struct {
		name   string
		before func(t *testing.T)
	}{
		{name: "while a person holds control", before: func(*testing.T) {}},
		{name: "after the takeover was released", before: func(t *testing.T) {
			status, _, _ := takeoverCall(t, c, "DELETE", bot, "")
			require.Equal(t, 200, status)
			requireClosedByServer(t, rfb, 20*time.Second, "the released control connection")
		}},
	} {
		t.Run(row.name, func(t *testing.T) {
			row.before(t)
			reached, open, listeners := rfbThroughLoopback(t, skip)
			assert.Empty(t, open, "loopback listeners of the worker's process that answer without authentication (THREAT-MODEL rule 2)")
			require.Empty(t, reached, "an unauthenticated local client completed the RFB handshake of the sandbox's desktop through the worker's loopback listener(s) %v (this process's loopback listeners but the API's and the emulator's: %v)", reached, listeners)
		})
	}
	// Issue 36's extra row: a grant ends with its bot. A link minted
	// before the bot's removal must not reach a re-added bot of that name
	// (its new screen) within the link's 10 minutes.
	t.Run("a takeover link outlives its bot's removal", func(t *testing.T) {
		status, link, msg := takeoverCall(t, c, "POST", bot, "")
		require.Equal(t, 200, status, msg)
		held := connectControl(t, link.URL)
		defer held.Close()
		require.Equal(t, 200, c.do(t, "DELETE", "/bots/"+bot, nil, nil))
		requireClosedByServer(t, held, 20*time.Second, "the control connection of a removed bot")
		require.Equal(t, 201, c.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		rc, st, err := dialRFB(ctx, wsURL(link.URL))
		cancel()
		if err == nil {
			herr := rc.handshake()
			rc.Close()
			require.Error(t, herr, "the removed bot's link completed the RFB handshake of the re-added bot's screen")
		}
		require.Equal(t, 410, st, "the removed bot's link is refused as released (HTTP %d, %v)", st, err)
	})
	// A fresh takeover still works through the worker's URL alone.
	status, link, msg = takeoverCall(t, c, "POST", bot, "")
	require.Equal(t, 200, status, msg)
	again := connectControl(t, link.URL)
	again.Close()
	status, _, _ = takeoverCall(t, c, "DELETE", bot, "")
	require.Equal(t, 200, status)
}
