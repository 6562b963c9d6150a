package vnc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/api"
	"github.com/open-bot/computer/apps/botd/internal/health"
	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/screen"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
)

// Integration tests use displays :260+ and ports 31500+ (x11vnc) and
// 31600+ (view/control) so packages testing in parallel never collide; the
// ports stay below Linux's ephemeral range (32768+), where a client
// socket's TIME_WAIT would keep a listener from binding. Each test takes
// its own block of 4 slots (newIT's n).
const (
	itDisplayBase  = 260
	itViewPortBase = 31600
	testToken      = "test-token-0123456789abcdef"
)

var desktopTools = []string{"Xvfb", "xfwm4", "xfce4-panel", "xfdesktop", "dbus-daemon", "x11vnc", "xdotool"}

// itEnv is botd's API (auth, screen routes, viewer routes) over real
// screens on loopback.
type itEnv struct {
	m       *screen.Manager
	v       *Server
	srv     *api.Server
	ts      *httptest.Server
	home    string
	desktop osuser.User
	log     *bytes.Buffer
}

// newIT starts an API on 127.0.0.1 with screens on displays
// itDisplayBase+4n.. (block n of 4 slots).
func newIT(t testing.TB, n int) *itEnv {
	t.Helper()
	off := 4 * n
	testenv.RequireRoot(t)
	testenv.RequireTools(t, desktopTools...)
	testenv.RequireUsers(t)
	home, err := os.MkdirTemp("", "vnc-it-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })
	d, err := osuser.Lookup("desktop")
	require.NoError(t, err)
	b, err := osuser.Lookup("bot")
	require.NoError(t, err)
	require.NoError(t, osuser.PrepareDirs(osuser.Layout(home, d, b)))
	logBuf := &bytes.Buffer{}
	log := zerolog.New(&syncWriter{w: logBuf}).Level(zerolog.DebugLevel)
	if os.Getenv("VNC_TEST_LOG") != "" {
		log = zerolog.New(io.MultiWriter(&syncWriter{w: logBuf}, zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000", NoColor: true})).With().Timestamp().Logger()
	}
	m := screen.New(screen.Options{Home: home, DisplayBase: itDisplayBase + off,
		ViewPortBase: itViewPortBase + 2*off, MaxScreens: 4, Desktop: d, Log: log})
	hub := health.NewHub()
	srv := api.New(api.Options{Token: testToken, Log: log, Hub: hub, Health: health.NewModel(hub, time.Now())})
	m.Routes(srv.Mux())
	v := New(Options{Screens: m, Token: testToken, Authorized: srv.Authorized, ListenHost: "127.0.0.1", Log: log})
	v.Routes(srv.Mux())
	srv.AllowSelfAuth(v.SelfAuth)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.Close(ctx)
		v.Close()
		ts.Close()
		hub.Close()
	})
	return &itEnv{m: m, v: v, srv: srv, ts: ts, home: home, desktop: d, log: logBuf}
}

type syncWriter struct {
	// mu guards w.
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// call makes a bearer-authed JSON request and decodes the answer into out.
func (e *itEnv) call(t testing.TB, method, path string, body, out any) int {
	t.Helper()
	return e.callAuth(t, method, path, "Bearer "+testToken, body, out)
}

func (e *itEnv) callAuth(t testing.TB, method, path, auth string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, rd)
	require.NoError(t, err)
	if auth != "" {
		if strings.HasPrefix(auth, "Bearer ") {
			req.Header.Set("Authorization", auth)
		} else {
			req.Header.Set("X-Viewer-Token", auth)
		}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && len(b) > 0 {
		require.NoError(t, json.Unmarshal(b, out), "body: %s", b)
	}
	return res.StatusCode
}

// start ensures screen id runs.
func (e *itEnv) start(t testing.TB, id string) screen.Info {
	t.Helper()
	var in screen.Info
	require.Equal(t, http.StatusOK, e.call(t, "POST", "/screens/"+id+"/start", nil, &in))
	require.NotNil(t, in.Ports)
	return in
}

// mint asks for a viewer link.
func (e *itEnv) mint(t testing.TB, id string, mode Mode, holder string, ttl int) MintResponse {
	t.Helper()
	var mr MintResponse
	req := map[string]any{"mode": mode, "ttlSeconds": ttl}
	if holder != "" {
		req["holder"] = holder
	}
	require.Equal(t, http.StatusOK, e.call(t, "POST", "/screens/"+id+"/viewer-token", req, &mr))
	return mr
}

func (e *itEnv) wsURL(path string) string { return "ws" + strings.TrimPrefix(e.ts.URL, "http") + path }

// pointer is the screen's pointer position (xdotool as desktop).
func (e *itEnv) pointer(t testing.TB, id string) (int, int) {
	t.Helper()
	out := e.xdotool(t, id, "getmouselocation", "--shell")
	var x, y int
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "X="); ok {
			x, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(l, "Y="); ok {
			y, _ = strconv.Atoi(v)
		}
	}
	return x, y
}

func (e *itEnv) xdotool(t testing.TB, id string, args ...string) string {
	t.Helper()
	env, ok := e.m.Env(id)
	require.True(t, ok, "screen %s not running", id)
	var out bytes.Buffer
	u := e.desktop
	p, err := runner.Exec{}.Start(runner.Spec{Argv: append([]string{"xdotool"}, args...), User: &u, Env: env, Stdout: &out, Stderr: &out, Dir: "/"})
	require.NoError(t, err)
	code, err := p.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, code, "xdotool %v: %s", args, out.String())
	return out.String()
}

// rfbClient is a raw RFB client over a websocket (or TCP, for the direct
// baseline), enough to prove what reaches x11vnc.
type rfbClient struct {
	ws    *websocket.Conn
	conn  net.Conn
	br    *bufio.Reader
	W, H  int
	Proto string
}

// dialWS opens a websocket; on an HTTP refusal it returns the status.
func dialWS(ctx context.Context, url string, hdr http.Header) (*websocket.Conn, int, error) {
	c, res, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"binary"}, HTTPHeader: hdr})
	if err != nil {
		if res != nil {
			return nil, res.StatusCode, err
		}
		return nil, 0, err
	}
	return c, http.StatusSwitchingProtocols, nil
}

func newRFBOverWS(ctx context.Context, c *websocket.Conn) *rfbClient {
	c.SetReadLimit(64 << 20)
	nc := websocket.NetConn(context.Background(), c, websocket.MessageBinary)
	return &rfbClient{ws: c, conn: nc, br: bufio.NewReaderSize(nc, 1<<20), Proto: c.Subprotocol()}
}

// newRFBDirect dials x11vnc's own unix socket (root may; botd's relay
// does the same).
func newRFBDirect(sock string) (*rfbClient, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &rfbClient{conn: c, br: bufio.NewReaderSize(c, 1<<20)}, nil
}

func (c *rfbClient) Close() {
	if c.ws != nil {
		c.ws.Close(websocket.StatusNormalClosure, "")
	}
	c.conn.Close()
}

// handshake does version 3.8, security None, a shared ClientInit, and
// reads ServerInit; then asks for raw 32-bit pixels.
func (c *rfbClient) handshake() error {
	_ = c.conn.SetDeadline(time.Now().Add(30 * time.Second)) // generous: CI machines are shared
	defer c.conn.SetDeadline(time.Time{})
	ver := make([]byte, 12)
	if _, err := io.ReadFull(c.br, ver); err != nil {
		return fmt.Errorf("version: %w", err)
	}
	if !strings.HasPrefix(string(ver), "RFB ") {
		return fmt.Errorf("not RFB: %q", ver)
	}
	if _, err := c.conn.Write([]byte("RFB 003.008\n")); err != nil {
		return err
	}
	n, err := c.br.ReadByte()
	if err != nil {
		return err
	}
	types := make([]byte, n)
	if _, err := io.ReadFull(c.br, types); err != nil {
		return err
	}
	if !bytes.Contains(types, []byte{1}) {
		return fmt.Errorf("no None security: %v", types)
	}
	if _, err := c.conn.Write([]byte{1}); err != nil {
		return err
	}
	res := make([]byte, 4)
	if _, err := io.ReadFull(c.br, res); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(res) != 0 {
		return errors.New("security failed")
	}
	if _, err := c.conn.Write([]byte{1}); err != nil {
		return err
	}
	si := make([]byte, 24)
	if _, err := io.ReadFull(c.br, si); err != nil {
		return err
	}
	c.W, c.H = int(binary.BigEndian.Uint16(si[0:2])), int(binary.BigEndian.Uint16(si[2:4]))
	name := make([]byte, binary.BigEndian.Uint32(si[20:24]))
	if _, err := io.ReadFull(c.br, name); err != nil {
		return err
	}
	// 32 bpp, depth 24, little endian, true colour, 255 max, shifts 16/8/0.
	pf := []byte{0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0}
	enc := []byte{2, 0, 0, 1, 0, 0, 0, 0} // raw only
	_, err = c.conn.Write(append(pf, enc...))
	return err
}

func (c *rfbClient) request(incremental bool, x, y, w, h int) error {
	b := []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if incremental {
		b[1] = 1
	}
	binary.BigEndian.PutUint16(b[2:], uint16(x))
	binary.BigEndian.PutUint16(b[4:], uint16(y))
	binary.BigEndian.PutUint16(b[6:], uint16(w))
	binary.BigEndian.PutUint16(b[8:], uint16(h))
	_, err := c.conn.Write(b)
	return err
}

func (c *rfbClient) pointer(mask byte, x, y int) error {
	b := []byte{5, mask, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(b[2:], uint16(x))
	binary.BigEndian.PutUint16(b[4:], uint16(y))
	_, err := c.conn.Write(b)
	return err
}

func (c *rfbClient) key(down bool, keysym uint32) error {
	b := []byte{4, 0, 0, 0, 0, 0, 0, 0}
	if down {
		b[1] = 1
	}
	binary.BigEndian.PutUint32(b[4:], keysym)
	_, err := c.conn.Write(b)
	return err
}

// typeText presses and releases each ASCII character (keysym = code),
// "\n" as Return.
func (c *rfbClient) typeText(s string) error {
	for _, r := range s {
		ks := uint32(r)
		if r == '\n' {
			ks = 0xff0d
		}
		if err := c.key(true, ks); err != nil {
			return err
		}
		if err := c.key(false, ks); err != nil {
			return err
		}
	}
	return nil
}

// readUpdate reads server messages until one FramebufferUpdate has been
// read whole; it returns the pixels it carried (raw encoding only).
func (c *rfbClient) readUpdate(timeout time.Duration) ([]rect, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(timeout))
	defer c.conn.SetReadDeadline(time.Time{})
	for {
		t, err := c.br.ReadByte()
		if err != nil {
			return nil, err
		}
		switch t {
		case 0:
			h := make([]byte, 3)
			if _, err := io.ReadFull(c.br, h); err != nil {
				return nil, err
			}
			n := int(binary.BigEndian.Uint16(h[1:3]))
			var rects []rect
			for i := 0; i < n; i++ {
				rh := make([]byte, 12)
				if _, err := io.ReadFull(c.br, rh); err != nil {
					return nil, err
				}
				r := rect{X: int(binary.BigEndian.Uint16(rh[0:])), Y: int(binary.BigEndian.Uint16(rh[2:])),
					W: int(binary.BigEndian.Uint16(rh[4:])), H: int(binary.BigEndian.Uint16(rh[6:])), Enc: int32(binary.BigEndian.Uint32(rh[8:]))}
				if r.Enc != 0 {
					return nil, fmt.Errorf("unexpected encoding %d", r.Enc)
				}
				r.Pix = make([]byte, r.W*r.H*4)
				if _, err := io.ReadFull(c.br, r.Pix); err != nil {
					return nil, err
				}
				rects = append(rects, r)
			}
			return rects, nil
		case 1: // colour map entries
			h := make([]byte, 5)
			if _, err := io.ReadFull(c.br, h); err != nil {
				return nil, err
			}
			if _, err := io.CopyN(io.Discard, c.br, int64(binary.BigEndian.Uint16(h[3:5]))*6); err != nil {
				return nil, err
			}
		case 2: // bell
		case 3: // server cut text
			h := make([]byte, 7)
			if _, err := io.ReadFull(c.br, h); err != nil {
				return nil, err
			}
			if _, err := io.CopyN(io.Discard, c.br, int64(binary.BigEndian.Uint32(h[3:7]))); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("unexpected server message %d", t)
		}
	}
}

type rect struct {
	X, Y, W, H int
	Enc        int32
	Pix        []byte
}

// variance of the rects' grey levels: a drawn desktop is far from 0.
func variance(rects []rect) float64 {
	var n, sum, sq float64
	for _, r := range rects {
		for i := 0; i+3 < len(r.Pix); i += 4 * 7 {
			g := (float64(r.Pix[i]) + float64(r.Pix[i+1]) + float64(r.Pix[i+2])) / 3
			n++
			sum += g
			sq += g * g
		}
	}
	if n == 0 {
		return 0
	}
	m := sum / n
	return sq/n - m*m
}

// closeStatus waits for the websocket to end and returns its close code.
func closeStatus(c *rfbClient, within time.Duration) (websocket.StatusCode, string, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c.br)
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code, ce.Reason, nil
	}
	if st := websocket.CloseStatus(err); st != -1 {
		return st, "", nil
	}
	return -1, "", err
}

// fullFrame asks for the whole screen and reads updates until they cover
// it (x11vnc may split one answer into several updates).
func (c *rfbClient) fullFrame(timeout time.Duration) ([]rect, error) {
	if err := c.request(false, 0, 0, c.W, c.H); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	var all []rect
	area := 0
	for area < c.W*c.H {
		rects, err := c.readUpdate(time.Until(deadline))
		if err != nil {
			return nil, err
		}
		for _, r := range rects {
			area += r.W * r.H
		}
		all = append(all, rects...)
	}
	return all, nil
}

// framePNG draws rects (BGRX little-endian raw pixels) into a PNG file.
func framePNG(t testing.TB, w, h int, rects []rect, path string) {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for _, r := range rects {
		for y := 0; y < r.H; y++ {
			for x := 0; x < r.W; x++ {
				i := 4 * (y*r.W + x)
				img.Set(r.X+x, r.Y+y, color.RGBA{R: r.Pix[i+2], G: r.Pix[i+1], B: r.Pix[i], A: 255})
			}
		}
	}
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, png.Encode(f, img))
}

// drawnFrame waits (up to timeout) for a full frame that shows a drawn
// desktop: right after a start, XFCE may not have painted yet.
func (c *rfbClient) drawnFrame(timeout time.Duration) ([]rect, error) {
	deadline := time.Now().Add(timeout)
	for {
		rects, err := c.fullFrame(time.Until(deadline))
		if err != nil {
			return nil, err
		}
		if variance(rects) > 10 {
			return rects, nil
		}
		if time.Now().After(deadline) {
			return rects, fmt.Errorf("the desktop was not drawn within %v (variance %.1f)", timeout, variance(rects))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
