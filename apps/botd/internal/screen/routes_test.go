package screen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
)

type apiResp struct {
	status int
	body   map[string]any
}

func (r apiResp) code() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (r apiResp) message() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["message"].(string)
	return c
}

func call(t *testing.T, h http.Handler, method, path string, body any) apiResp {
	t.Helper()
	var rd *bytes.Reader
	if s, ok := body.(string); ok {
		rd = bytes.NewReader([]byte(s))
	} else {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req := httptest.NewRequest(method, path, rd)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	out := apiResp{status: rec.Code}
	_ = json.Unmarshal(rec.Body.Bytes(), &out.body)
	return out
}

func TestRoutes(t *testing.T) {
	f := newFixture(t, 2, 0)
	mux := http.NewServeMux()
	f.m.Routes(mux)

	// Bad ids are 400 everywhere; unknown screens are 404 for actions.
	long := strings.Repeat("x", 65)
	for _, p := range []string{"/screens/" + long + "/act", "/screens/a.b/observe", "/screens/a%20b/start", "/screens/" + long + "/lease"} {
		r := call(t, mux, "POST", p, map[string]any{})
		require.Equal(t, 400, r.status, p)
		require.Equal(t, "invalid_id", r.code(), p)
	}
	for _, p := range []string{"/screens/ghost/act", "/screens/ghost/observe", "/screens/ghost/launch", "/screens/ghost/stop"} {
		r := call(t, mux, "POST", p, map[string]any{"leaseId": "x"})
		require.Equal(t, 404, r.status, p)
		require.Equal(t, "not_found", r.code(), p)
	}

	// Lease.
	r := call(t, mux, "POST", "/screens/a/lease", map[string]any{"kind": "agent", "holder": "run1", "ttlSeconds": 60})
	require.Equal(t, 200, r.status, r.body)
	leaseID := r.body["leaseId"].(string)
	require.Equal(t, "agent", r.body["kind"])
	require.NotEmpty(t, r.body["expiresAt"])
	r = call(t, mux, "POST", "/screens/a/lease", map[string]any{"kind": "robot", "holder": "x"})
	require.Equal(t, 400, r.status)

	// Batch limits name the field.
	var many []map[string]any
	for i := 0; i < 51; i++ {
		many = append(many, map[string]any{"type": "screenshot"})
	}
	r = call(t, mux, "POST", "/screens/a/act", map[string]any{"leaseId": leaseID, "actions": many})
	require.Equal(t, 400, r.status)
	require.Equal(t, "invalid_action", r.code())
	require.Contains(t, r.message(), "actions[50]")
	r = call(t, mux, "POST", "/screens/a/act", map[string]any{"leaseId": leaseID, "actions": []any{
		map[string]any{"type": "move", "x": 1, "y": 1},
		map[string]any{"type": "type", "text": strings.Repeat("é", shared.MaxTypeChars+1)}}})
	require.Equal(t, 400, r.status)
	require.Equal(t, "invalid_action", r.code())
	require.Contains(t, r.message(), "actions[1].text")
	r = call(t, mux, "POST", "/screens/a/act", map[string]any{"leaseId": leaseID, "actions": []any{map[string]any{"type": "click", "x": 1280, "y": 0}}})
	require.Equal(t, 400, r.status)
	require.Contains(t, r.message(), "actions[0].x")
	// A type of exactly 10,000 characters is fine.
	r = call(t, mux, "POST", "/screens/a/act", map[string]any{"leaseId": leaseID, "actions": []any{map[string]any{"type": "type", "text": strings.Repeat("日", shared.MaxTypeChars)}}})
	require.Equal(t, 200, r.status, r.body)

	// Stale lease.
	r = call(t, mux, "POST", "/screens/a/observe", map[string]any{"leaseId": "nope"})
	require.Equal(t, 409, r.status)
	require.Equal(t, "lease_required", r.code())

	// Observe twice: the second is unchanged and has no image.
	r = call(t, mux, "POST", "/screens/a/observe", map[string]any{"leaseId": leaseID})
	require.Equal(t, 200, r.status, r.body)
	require.Equal(t, true, r.body["unchanged"], "the act above already returned this frame")
	require.Nil(t, r.body["image"])
	require.Equal(t, []any{}, r.body["blocked"])
	f.be.stack("a").drv.setHash(7)
	r = call(t, mux, "POST", "/screens/a/observe", map[string]any{"leaseId": leaseID})
	require.Equal(t, false, r.body["unchanged"])
	require.NotEmpty(t, r.body["image"])
	require.EqualValues(t, 1280, r.body["width"])

	// Launch: allow-list only.
	r = call(t, mux, "POST", "/screens/a/launch", map[string]any{"leaseId": leaseID, "app": "rm"})
	require.Equal(t, 400, r.status)
	r = call(t, mux, "POST", "/screens/a/launch", map[string]any{"leaseId": leaseID, "app": "terminal"})
	require.Equal(t, 200, r.status, r.body)
	require.Contains(t, f.be.events(), "launch a xfce4-terminal")

	// User takeover.
	r = call(t, mux, "POST", "/screens/a/lease", map[string]any{"kind": "user", "holder": "ann"})
	require.Equal(t, 200, r.status)
	userLease := r.body["leaseId"].(string)
	f.m.bg.Wait() // the takeover's wake-up start
	r = call(t, mux, "POST", "/screens/a/act", map[string]any{"leaseId": leaseID, "actions": []any{map[string]any{"type": "screenshot"}}})
	require.Equal(t, 409, r.status)
	require.Equal(t, "user_has_control", r.code())

	// Listing.
	r = call(t, mux, "GET", "/screens", nil)
	require.Equal(t, 200, r.status)
	list := r.body["screens"].([]any)
	require.Len(t, list, 1)
	a := list[0].(map[string]any)
	require.Equal(t, "running", a["state"])
	require.Equal(t, ":10", a["display"])
	require.Equal(t, "user", a["lease"].(map[string]any)["kind"])
	require.NotContains(t, fmt.Sprint(a), userLease, "listings never carry lease ids")

	// Release, stop, forget.
	r = call(t, mux, "DELETE", "/screens/a/lease/"+leaseID, nil)
	require.Equal(t, 404, r.status, "the preempted lease is gone")
	r = call(t, mux, "DELETE", "/screens/a/lease/"+userLease, nil)
	require.Equal(t, 200, r.status)
	r = call(t, mux, "POST", "/screens/a/stop", nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, "stopped", r.body["state"])
	r = call(t, mux, "DELETE", "/screens/a", nil)
	require.Equal(t, 200, r.status)
	r = call(t, mux, "POST", "/screens/a/observe", map[string]any{"leaseId": userLease})
	require.Equal(t, 404, r.status)

	// Start.
	r = call(t, mux, "POST", "/screens/b/start", nil)
	require.Equal(t, 200, r.status, r.body)
	require.Equal(t, "running", r.body["state"])
}
