package e2b

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestForwarder: botd's traffic goes through the vendor's routing with the
// sandbox named in headers (E2B_SANDBOX_URL) and the traffic token added;
// use is counted except the worker's own probes; a websocket passes
// through and counts while open; a 502 from the vendor's proxy on a paused
// sandbox is explained.
func TestForwarder(t *testing.T) {
	// The vendor's proxy in front of the sandbox's port 7000 (here: it
	// checks the routing headers and answers what it got).
	routing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("E2b-Sandbox-Id") != "sbx1" || r.Header.Get("E2b-Sandbox-Port") != "7000" ||
			r.Header.Get("E2b-Traffic-Access-Token") != "traffic-tok" {
			http.Error(w, "not routed", http.StatusForbidden)
			return
		}
		switch r.URL.Path {
		case "/lapsed":
			http.Error(w, "sandbox not running", http.StatusBadGateway)
		case "/agent":
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			typ, b, err := c.Read(r.Context())
			if err == nil {
				_ = c.Write(r.Context(), typ, b)
			}
			_, _, _ = c.Read(r.Context())
		default:
			_ = json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "auth": r.Header.Get("Authorization"),
				"envd": r.Header.Get("X-Access-Token")})
		}
	}))
	defer routing.Close()
	_, cp := newSpecServer(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		answer(w, 200, map[string]any{"templateID": "open-bot", "sandboxID": "sbx1", "clientID": "c",
			"startedAt": time.Now().UTC().Format(time.RFC3339), "endAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
			"cpuCount": 2, "memoryMB": 2048, "diskSizeMB": 10240, "state": "paused", "envdVersion": "0.2.0"})
	})
	p, _ := testProvider(t, cp)
	p.o.SandboxURL = routing.URL
	sb := Sandbox{SandboxID: "sbx1", EnvdAccessToken: "envd-tok", TrafficAccessToken: ptr("traffic-tok")}
	s, err := p.session(sb)
	require.NoError(t, err)
	again, err := p.session(sb)
	require.NoError(t, err)
	require.Same(t, s, again, "one session per sandbox")

	get := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, s.fwd.URL()+path, nil)
		req.Header.Set("Authorization", "Bearer botd-token")
		resp, err := s.fwd.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/screens")
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"path":"/screens","auth":"Bearer botd-token","envd":""}`, body, "botd's bearer token passes; envd's token does not go to botd")
	_, err = http.Get(s.fwd.URL() + "/screens")
	require.Error(t, err, "the forwarder's URL is reached only through its own client: nothing listens")

	long := time.Now().Add(-time.Hour)
	s.fwd.TouchAt(long)
	code, _ = get("/health")
	require.Equal(t, http.StatusOK, code)
	require.False(t, s.fwd.inUse(time.Now(), time.Minute), "the worker's health probes are not use")
	get("/screens/alice/observe")
	require.True(t, s.fwd.inUse(time.Now(), time.Minute), "a tool call is use")

	s.fwd.TouchAt(long)
	ws, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(s.fwd.URL(), "http")+"/agent", &websocket.DialOptions{HTTPClient: s.fwd.Client()})
	require.NoError(t, err)
	require.NoError(t, ws.Write(t.Context(), websocket.MessageText, []byte("hello")))
	_, b, err := ws.Read(t.Context())
	require.NoError(t, err)
	require.Equal(t, "hello", string(b), "a websocket passes through the forwarder and the vendor's routing")
	s.fwd.TouchAt(long)
	require.True(t, s.fwd.inUse(time.Now(), time.Minute), "an open agent connection is use")
	ws.Close(websocket.StatusNormalClosure, "")

	code, body = get("/lapsed")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "the E2B sandbox is paused (its timeout lapsed")

	open, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(s.fwd.URL(), "http")+"/agent", &websocket.DialOptions{HTTPClient: s.fwd.Client()})
	require.NoError(t, err)
	p.drop("sbx1")
	rctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	_, _, err = open.Read(rctx)
	require.Error(t, err)
	require.NoError(t, rctx.Err(), "a dropped session's open websocket is closed by the forwarder")
	cancel()
	_, err = s.fwd.Client().Get(s.fwd.URL() + "/screens")
	require.Error(t, err, "a dropped session's forwarder answers nothing")
}

func ptr[T any](v T) *T { return &v }
