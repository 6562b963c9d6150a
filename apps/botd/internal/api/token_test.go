package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/health"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// newToken is what the tests rotate to.
const newToken = "computer-token-0123456789abcdef"

// rotateServer is newTestServer's server with a recorder on OnTokenRotate
// and a log; it returns what the hooks were told.
func rotateServer(t *testing.T) (*Server, *httptest.Server, func() []string, *bytes.Buffer) {
	t.Helper()
	hub := health.NewHub()
	t.Cleanup(hub.Close)
	logBuf := &bytes.Buffer{}
	var logMu sync.Mutex
	log := zerolog.New(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logBuf.Write(p)
	})).Level(zerolog.DebugLevel)
	s := New(Options{Token: token, Log: log, Hub: hub, Health: health.NewModel(hub, time.Now())})
	var mu sync.Mutex
	var told []string
	s.OnTokenRotate(func(tok string) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, tok)
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), told...)
	}, logBuf
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestRotateToken: after a 204 the old token is 401 on every route (the
// websocket's ?token= too) and the new one works; the hooks were told the
// new token once, before the 204; the log says it rotated and never shows
// either token. A second rotation moves on from the new token.
func TestRotateToken(t *testing.T) {
	_, ts, told, logs := rotateServer(t)
	status, _, raw := do(t, "PUT", ts.URL+"/token", token, `{"token":"`+newToken+`"}`)
	require.Equal(t, http.StatusNoContent, status, raw)
	require.Empty(t, raw)
	require.Equal(t, []string{newToken}, told())

	for _, path := range []string{"/health", "/nope"} {
		status, env, raw := do(t, "GET", ts.URL+path, token, "")
		require.Equal(t, http.StatusUnauthorized, status, "%s with the old token: %s", path, raw)
		require.Equal(t, shared.CodeUnauthorized, env.Error.Code)
	}
	status, _, raw = do(t, "PUT", ts.URL+"/token", token, `{"token":"yet-another-token-0123456789"}`)
	require.Equal(t, http.StatusUnauthorized, status, "the old token cannot rotate again: %s", raw)
	status, _, raw = do(t, "GET", ts.URL+"/health", newToken, "")
	require.Equal(t, http.StatusOK, status, raw)
	status, _, raw = do(t, "GET", ts.URL+"/nope", newToken, "")
	require.Equal(t, http.StatusNotFound, status, raw)
	status, _, _ = do(t, "GET", ts.URL+"/events?token="+token, "upgrade", "")
	require.Equal(t, http.StatusUnauthorized, status, "the old token in a websocket's ?token=")

	const third = "third-token-0123456789abcdef"
	status, _, raw = do(t, "PUT", ts.URL+"/token", newToken, `{"token":"`+third+`"}`)
	require.Equal(t, http.StatusNoContent, status, raw)
	require.Equal(t, []string{newToken, third}, told())
	status, _, _ = do(t, "GET", ts.URL+"/health", newToken, "")
	require.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = do(t, "GET", ts.URL+"/health", third, "")
	require.Equal(t, http.StatusOK, status)

	require.Contains(t, logs.String(), "bearer token rotated")
	for _, tok := range []string{token, newToken, third} {
		require.NotContains(t, logs.String(), tok, "a token in the log")
	}
}

// TestRotateTokenRefusals: only the current token in the Authorization
// header rotates; the new token must pass config.ValidToken and differ from
// the current one. A refused rotation changes nothing. Each case has a
// server of its own, so one wrongly accepted cannot hide the next.
func TestRotateTokenRefusals(t *testing.T) {
	body := `{"token":"` + newToken + `"}`
	for _, tc := range []struct {
		name, path, auth, body string
		hdr                    map[string]string
		status                 int
		code                   shared.Code
	}{
		{"no credential", "/token", "", body, nil, 401, shared.CodeUnauthorized},
		{"wrong token", "/token", "wrong-token-0123456789abcdef", body, nil, 401, shared.CodeUnauthorized},
		{"query token", "/token?token=" + token, "", body, nil, 401, shared.CodeUnauthorized},
		{"query token on an upgrade", "/token?token=" + token, "upgrade", body, nil, 401, shared.CodeUnauthorized},
		{"a viewer link as the bearer", "/token", "vt1.eyJzIjoiYSJ9.c2ln", body, nil, 401, shared.CodeUnauthorized},
		{"a self-authed request", "/token", "", body, map[string]string{"X-Viewer-Token": "vt1.eyJzIjoiYSJ9.c2ln"}, 401, shared.CodeUnauthorized},
		{"a self-authed request with the token in the query", "/token?token=" + token, "", body, map[string]string{"X-Viewer-Token": "x"}, 401, shared.CodeUnauthorized},
		{"the current token", "/token", token, `{"token":"` + token + `"}`, nil, 400, shared.CodeBadRequest},
		{"too short", "/token", token, `{"token":"fifteen-chars!!"}`, nil, 400, shared.CodeBadRequest},
		{"empty", "/token", token, `{"token":""}`, nil, 400, shared.CodeBadRequest},
		{"a space", "/token", token, `{"token":"sixteen chars and more"}`, nil, 400, shared.CodeBadRequest},
		{"a newline", "/token", token, `{"token":"sixteen-chars-and\nmore"}`, nil, 400, shared.CodeBadRequest},
		{"too long for a header", "/token", token, `{"token":"` + strings.Repeat("x", 513) + `"}`, nil, 400, shared.CodeBadRequest},
		{"no token field", "/token", token, `{}`, nil, 400, shared.CodeBadRequest},
		{"unknown field", "/token", token, `{"token":"` + newToken + `","persist":true}`, nil, 400, shared.CodeInvalidJSON},
		{"not JSON", "/token", token, newToken, nil, 400, shared.CodeInvalidJSON},
		{"a number", "/token", token, `{"token":12345678901234567890}`, nil, 400, shared.CodeInvalidJSON},
		{"oversized", "/token", token, `{"token":"` + strings.Repeat("a", 9000) + `"}`, nil, 413, shared.CodeTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ts, told, _ := rotateServer(t)
			// A matcher as broad as a careless viewer route's: the route
			// must check the bearer itself, not trust the middleware.
			s.AllowSelfAuth(func(r *http.Request) bool { return r.Header.Get("X-Viewer-Token") != "" })
			req, err := http.NewRequest("PUT", ts.URL+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			switch tc.auth {
			case "":
			case "upgrade":
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "websocket")
			default:
				req.Header.Set("Authorization", "Bearer "+tc.auth)
			}
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			status, env, raw := send(t, req)
			require.Equal(t, tc.status, status, raw)
			require.Equal(t, tc.code, env.Error.Code, raw)
			require.NotContains(t, raw, token)
			require.NotContains(t, raw, newToken)
			require.Empty(t, told(), "a refused rotation tells nobody")
			status, _, _ = do(t, "GET", ts.URL+"/health", token, "")
			require.Equal(t, http.StatusOK, status, "the token is unchanged")
			status, _, _ = do(t, "GET", ts.URL+"/health", newToken, "")
			require.Equal(t, http.StatusUnauthorized, status)
		})
	}
	_, ts, _, _ := rotateServer(t)
	status, env, _ := do(t, "GET", ts.URL+"/token", token, "")
	require.Equal(t, http.StatusMethodNotAllowed, status)
	require.Equal(t, shared.CodeMethodNotAllowed, env.Error.Code)
}

func send(t *testing.T, req *http.Request) (int, shared.ErrorEnvelope, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	var env shared.ErrorEnvelope
	_ = json.Unmarshal(b.Bytes(), &env)
	return resp.StatusCode, env, b.String()
}

// statusOf sends req and returns its status (0 when it was not answered),
// for goroutines, which must not call require.
func statusOf(req *http.Request) int {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRotateTokenDuringTraffic (run with -race): readers call Authorized
// with the old and the new token while a rotation happens. Each reader sees
// the old token work until, once, the new one does, never both at once and
// never going back; after the 204 it is the new one for all. A request in
// flight under the old token when the rotation lands still finishes.
func TestRotateTokenDuringTraffic(t *testing.T) {
	s, ts, _, _ := rotateServer(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before ts.Close (cleanups run last first)
	s.Mux().HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		_, _ = w.Write([]byte("done"))
	})
	inFlight := make(chan int, 1)
	slow, _ := http.NewRequest("GET", ts.URL+"/slow", nil)
	slow.Header.Set("Authorization", "Bearer "+token)
	go func() { inFlight <- statusOf(slow) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow request never reached its handler")
	}

	oldReq := httptest.NewRequest("GET", "/health", nil)
	oldReq.Header.Set("Authorization", "Bearer "+token)
	newReq := httptest.NewRequest("GET", "/health", nil)
	newReq.Header.Set("Authorization", "Bearer "+newToken)
	const readers = 8
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	var before, after atomic.Int64
	errs := make(chan string, readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rotated, counted := false, false
			for ctx.Err() == nil {
				// New before old: if the new one works, the old must not
				// (a reader must never see the old after the new).
				n, o := s.Authorized(newReq), s.Authorized(oldReq)
				switch {
				case n && o:
					errs <- "both tokens authorized at once"
					return
				case rotated && o:
					errs <- "the old token worked again after the new one had"
					return
				case !rotated && n:
					rotated = true
					after.Add(1)
				case !counted && o:
					counted = true
					before.Add(1)
				}
			}
		}()
	}
	require.Eventually(t, func() bool { return before.Load() == readers }, 10*time.Second, time.Millisecond, "every reader saw the old token work")
	status, _, raw := do(t, "PUT", ts.URL+"/token", token, `{"token":"`+newToken+`"}`)
	require.Equal(t, http.StatusNoContent, status, raw)
	require.False(t, s.Authorized(oldReq))
	require.True(t, s.Authorized(newReq))
	require.Eventually(t, func() bool { return after.Load() == readers || len(errs) > 0 }, 10*time.Second, time.Millisecond, "every reader sees the new token")
	cancel()
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}

	unblock()
	select {
	case status := <-inFlight:
		require.Equal(t, http.StatusOK, status, "a request in flight under the old token finishes")
	case <-time.After(10 * time.Second):
		t.Fatal("the in-flight request never finished")
	}
}

// TestRotateTokenRace: rotations sent with the same token, all past the
// bearer check before any body arrives (each waits for "100 Continue",
// which the server sends once the handler reads the body): exactly one wins
// (204), the others find their token gone (401), and the hooks end on the
// winner's token, the one that works.
func TestRotateTokenRace(t *testing.T) {
	_, ts, told, _ := rotateServer(t)
	const n = 8
	type pending struct {
		conn net.Conn
		br   *bufio.Reader
		body string
	}
	var ps []pending
	for i := range n {
		body := fmt.Sprintf(`{"token":"racer-%02d-0123456789abcdef"}`, i)
		conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = fmt.Fprintf(conn, "PUT /token HTTP/1.1\r\nHost: botd\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", token, len(body))
		require.NoError(t, err)
		br := bufio.NewReader(conn)
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		require.Contains(t, line, " 100 ", "rotation %d is past the bearer check", i)
		for line != "\r\n" {
			line, err = br.ReadString('\n')
			require.NoError(t, err)
		}
		ps = append(ps, pending{conn, br, body})
	}
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := io.WriteString(p.conn, p.body); err != nil {
				return
			}
			res, err := http.ReadResponse(p.br, nil)
			if err != nil {
				return
			}
			res.Body.Close()
			statuses[i] = res.StatusCode
		}()
	}
	wg.Wait()
	winner := -1
	for i, st := range statuses {
		switch st {
		case http.StatusNoContent:
			require.Equal(t, -1, winner, "two rotations with one token both won: %v", statuses)
			winner = i
		case http.StatusUnauthorized:
		default:
			t.Fatalf("rotation %d: %d (%v)", i, st, statuses)
		}
	}
	require.NotEqual(t, -1, winner, "%v", statuses)
	want := fmt.Sprintf("racer-%02d-0123456789abcdef", winner)
	require.Equal(t, []string{want}, told())
	status, _, _ := do(t, "GET", ts.URL+"/health", want, "")
	require.Equal(t, http.StatusOK, status)
}

// TestRotateTokenHooksInOrder: a rotation sent with the new token while
// the previous rotation's hooks still run (a retry of the worker that chose
// it) waits for them, so the hooks are told the tokens in the order the
// bearer check took them and end on the current one: the bearer and the
// viewer-link key never end on different tokens.
func TestRotateTokenHooksInOrder(t *testing.T) {
	s, ts, _, _ := rotateServer(t)
	const third = "third-token-0123456789abcdef"
	var mu sync.Mutex
	var order []string
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	s.OnTokenRotate(func(tok string) {
		if tok == newToken {
			close(entered)
			<-release // the first rotation's hooks are slow
		}
		mu.Lock()
		defer mu.Unlock()
		order = append(order, tok)
	})
	put := func(auth, to string) chan int {
		ch := make(chan int, 1)
		req, _ := http.NewRequest("PUT", ts.URL+"/token", strings.NewReader(`{"token":"`+to+`"}`))
		req.Header.Set("Authorization", "Bearer "+auth)
		go func() { ch <- statusOf(req) }()
		return ch
	}
	first := put(token, newToken)
	<-entered
	second := put(newToken, third)
	// The second must wait for the first's hooks; give it a moment to show
	// that it does not (a correct server passes however long this is).
	secondStatus := 0
	select {
	case secondStatus = <-second:
		t.Errorf("the second rotation finished (%d) while the first's hooks ran", secondStatus)
	case <-time.After(200 * time.Millisecond):
	}
	unblock()
	require.Equal(t, http.StatusNoContent, <-first)
	if secondStatus == 0 {
		secondStatus = <-second
	}
	require.Equal(t, http.StatusNoContent, secondStatus)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{newToken, third}, order, "hooks told in the bearer's order")
	require.True(t, s.isToken(third))
}

// TestClientRotateToken: the typed client against this server: the client
// it returns works, the one it was called on gets 401, and a refused
// rotation returns botd's error and no client.
func TestClientRotateToken(t *testing.T) {
	_, ts, _, _ := rotateServer(t)
	ctx := t.Context()
	old := client.New(ts.URL, token, nil)
	_, err := old.RotateToken(ctx, token)
	require.Equal(t, shared.CodeBadRequest, client.CodeOf(err))
	_, err = old.RotateToken(ctx, "short")
	require.Equal(t, shared.CodeBadRequest, client.CodeOf(err))

	nc, err := old.RotateToken(ctx, newToken)
	require.NoError(t, err)
	require.Equal(t, newToken, nc.Token())
	require.Equal(t, old.BaseURL(), nc.BaseURL())
	require.Same(t, old.HTTPClient(), nc.HTTPClient())
	_, err = nc.Health(ctx)
	require.NoError(t, err)
	_, err = old.Health(ctx)
	require.Equal(t, shared.CodeUnauthorized, client.CodeOf(err))
	_, err = old.RotateToken(ctx, "another-token-0123456789")
	require.Equal(t, shared.CodeUnauthorized, client.CodeOf(err))
	require.NotContains(t, err.Error(), token)
}
