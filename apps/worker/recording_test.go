package main

// Screen recordings through the worker, against a real botd (display
// 1510, view ports 34500+): a run with record: true keeps its recording,
// the bot's recordings routes (start, a second start refused, stop, a
// second stop refused, list, download whole and by range, unknown ids),
// and the dashboard's replay of the run in real headless Chromium: the
// video beside the run's tool calls, a mark per tool call at its moment,
// a click on a mark seeks the video there, and the video plays.

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/pkg/shared"
)

// recVideo GETs a recording's video through the worker's API.
func recVideo(t *testing.T, e *workerEnv, path, rangeHeader string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", e.url+"/v1/computers/"+e.computer+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("X-Computer-Capability", e.capa)
	if rangeHeader != "" {
		req.Header.Set("Range", rangeHeader)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

// decodedFrames decodes an MP4 with ffprobe and returns its frame count.
func decodedFrames(t *testing.T, data []byte) int {
	t.Helper()
	p := filepath.Join(t.TempDir(), "v.mp4")
	require.NoError(t, os.WriteFile(p, data, 0o600))
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,nb_read_frames", "-of", "csv=p=0", p).CombinedOutput()
	require.NoError(t, err, "%s", out)
	f := strings.Split(strings.TrimSpace(string(out)), ",")
	require.Len(t, f, 2, "%s", out)
	require.Equal(t, "h264", f[0])
	n, err := strconv.Atoi(f[1])
	require.NoError(t, err)
	return n
}

func TestRunRecordingAndReplay(t *testing.T) {
	requireIntegration(t, "ffmpeg", "ffprobe", "mousepad")
	script := func(outs []mockmodel.Output) mockmodel.Step {
		steps := []mockmodel.Step{
			{Tool: "computer_observe", Args: map[string]any{}},
			{Tool: "launch_app", Args: map[string]any{"app": "editor"}},
			{Tool: "computer_act", Args: map[string]any{"actions": []any{
				map[string]any{"type": "wait", "ms": 1500},
				map[string]any{"type": "type", "text": "a run worth replaying"},
				map[string]any{"type": "wait", "ms": 1000}}}},
			{Tool: "computer_act", Args: map[string]any{"actions": []any{
				map[string]any{"type": "keypress", "keys": []string{"ctrl", "a"}},
				map[string]any{"type": "wait", "ms": 1000}}}},
			{Tool: "computer_observe", Args: map[string]any{}},
		}
		if len(outs) < len(steps) {
			return steps[len(outs)]
		}
		return mockmodel.Step{Message: "done"}
	}
	model := mockmodel.New(script).RequireKey(scriptedKey)
	modelSrv := httptest.NewServer(model)
	defer modelSrv.Close()
	c := startComputer(t, modelSrv.URL, 1510, "MAX_SCREENS=2", "VIEW_PORT_BASE=34500")
	e := startWorker(t, c, "alice")

	// A run that records itself.
	var started struct {
		Run runs.Snapshot `json:"run"`
	}
	require.Equal(t, http.StatusCreated, e.do(t, "POST", "/runs", map[string]any{"botId": "alice", "prompt": "Type something worth replaying.", "record": true}, &started))
	id := started.Run.ID
	final, _ := waitRun(t, e, id, 4*time.Minute)
	require.Equal(t, runs.StatusCompleted, final.Status, final.Error)
	snap := e.getRun(t, id)
	require.NotNil(t, snap.Recording, "the run names its recording")
	rec := *snap.Recording
	require.NotEmpty(t, rec.ID, "%+v", rec)
	require.Equal(t, "alice", rec.Screen)
	require.Equal(t, "stopped", rec.State, "%+v", rec)
	require.Equal(t, "requested", rec.StopReason, "%+v", rec)
	require.Greater(t, rec.Bytes, int64(0))
	require.Len(t, snap.ToolCalls, 5)

	// The bot's recordings: the run's is listed, and downloads.
	var list shared.Recordings
	require.Equal(t, http.StatusOK, e.do(t, "GET", "/bots/alice/recordings", nil, &list))
	require.Len(t, list.Recordings, 1)
	require.Equal(t, rec.ID, list.Recordings[0].ID)
	st, hdr, body := recVideo(t, e, "/bots/alice/recordings/"+rec.ID+"/video", "")
	require.Equal(t, http.StatusOK, st, string(body))
	require.Equal(t, "video/mp4", hdr.Get("Content-Type"))
	require.EqualValues(t, rec.Bytes, len(body))
	frames := decodedFrames(t, body)
	require.Greater(t, frames, 5, "the run lasted seconds at 8 fps")
	st, hdr, part := recVideo(t, e, "/bots/alice/recordings/"+rec.ID+"/video", "bytes=4-11")
	require.Equal(t, http.StatusPartialContent, st)
	require.Equal(t, body[4:12], part)
	require.Equal(t, "bytes 4-11/"+strconv.Itoa(len(body)), hdr.Get("Content-Range"))

	// A recording started and stopped through the API.
	var r2 shared.Recording
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/bots/alice/recordings", map[string]any{"fps": 5, "maxSeconds": 60}, &r2))
	require.Equal(t, "recording", r2.State)
	var apiErr shared.ErrorEnvelope
	require.Equal(t, http.StatusConflict, e.do(t, "POST", "/bots/alice/recordings", map[string]any{}, &apiErr))
	require.Equal(t, shared.CodeRecordingRunning, apiErr.Error.Code)
	require.Equal(t, http.StatusBadRequest, e.do(t, "POST", "/bots/alice/recordings", map[string]any{"fps": 1000}, &apiErr))
	waitFor(t, "a fragment of the second recording", 30*time.Second, func() bool {
		var got shared.Recording
		return e.do(t, "GET", "/bots/alice/recordings/"+r2.ID, nil, &got) == http.StatusOK && got.Bytes > 0
	})
	require.Equal(t, http.StatusOK, e.do(t, "POST", "/bots/alice/recordings/"+r2.ID+"/stop", nil, &r2))
	require.Equal(t, "requested", r2.StopReason)
	require.Equal(t, http.StatusConflict, e.do(t, "POST", "/bots/alice/recordings/"+r2.ID+"/stop", nil, &apiErr))
	require.Equal(t, shared.CodeRecordingEnded, apiErr.Error.Code)
	require.Equal(t, http.StatusNotFound, e.do(t, "POST", "/bots/alice/recordings/rec-20200101T000000-00000000/stop", nil, &apiErr))
	require.Equal(t, shared.CodeRecordingNotFound, apiErr.Error.Code)
	require.Equal(t, http.StatusNotFound, e.do(t, "GET", "/bots/nobody/recordings", nil, &apiErr))
	require.Equal(t, http.StatusOK, e.do(t, "DELETE", "/bots/alice/recordings/"+r2.ID, nil, nil))
	require.Equal(t, http.StatusOK, e.do(t, "GET", "/bots/alice/recordings", nil, &list))
	require.Len(t, list.Recordings, 1, "the run's recording stays")

	// What the replay must mark: each tool call at its moment in the video.
	evs, err := e.w.Store.Events(context.Background(), id, 0)
	require.NoError(t, err)
	t0, err := time.Parse(time.RFC3339Nano, rec.StartedAt)
	require.NoError(t, err)
	type mark struct {
		T    float64 `json:"t"`
		Tool string  `json:"tool"`
		Left float64 `json:"left"`
	}
	var want []mark
	for _, ev := range evs {
		if ev.Type == "tool_call" {
			var d struct {
				Tool string `json:"tool"`
			}
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			want = append(want, mark{T: ev.At.Sub(t0).Seconds(), Tool: d.Tool})
		}
	}
	require.Len(t, want, 5)

	// The dashboard's replay in real Chromium.
	link, err := e.w.People.LoginLink(e.url)
	require.NoError(t, err)
	ch := startCDP(t)
	s := ch.open(t, link)
	var text string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_ = ch.eval(s, `(() => { const a = document.querySelector('li[data-run="`+id+`"] a.replay'); return a ? a.href : ''; })()`, &text)
		if text != "" {
			break
		}
		if time.Now().After(deadline) {
			// What the page shows instead (rehearsal 40 timed out here).
			var page string
			_ = ch.eval(s, `location.pathname + " | polls " + (window.dashboard ? window.dashboard.polls : "none (app.js did not run)") +
				" | runs listed " + JSON.stringify([...document.querySelectorAll('li[data-run]')].map((li) => li.dataset.run)) +
				" | " + document.body.innerText.slice(0, 2000)`, &page)
			t.Fatalf("timed out waiting for the dashboard with the run's replay link; the page: %s", page)
		}
	}
	require.Contains(t, text, "/dashboard/replay?computer="+e.computer+"&run="+id)
	rs := ch.open(t, text)
	var ready bool
	waitFor(t, "the replay page", 60*time.Second, func() bool {
		return ch.eval(rs, `window.replay && window.replay.ready`, &ready) == nil && ready
	})
	var got struct {
		Marks    []mark  `json:"marks"`
		Duration float64 `json:"duration"`
		DOM      int     `json:"dom"`
		Lefts    []string
	}
	require.NoError(t, ch.eval(rs, `({marks: window.replay.marks, duration: window.replay.duration,
		dom: document.querySelectorAll('#timeline .mark').length,
		Lefts: [...document.querySelectorAll('#timeline .mark')].map((m) => m.style.left)})`, &got))
	require.Len(t, got.Marks, len(want))
	require.Equal(t, len(want), got.DOM)
	require.InDelta(t, rec.Seconds, got.Duration, 1.5, "the timeline spans the recording")
	for i, m := range got.Marks {
		require.Equal(t, want[i].Tool, m.Tool, "mark %d", i)
		require.InDelta(t, want[i].T, m.T, 0.002, "mark %d (%s) at its moment", i, m.Tool)
		require.GreaterOrEqual(t, m.T, 0.0, "mark %d after the recording began", i)
		require.LessOrEqual(t, m.T, got.Duration, "mark %d before it ended", i)
		require.InDelta(t, m.T/got.Duration*100, m.Left, 0.01)
		left, err := strconv.ParseFloat(strings.TrimSuffix(got.Lefts[i], "%"), 64)
		require.NoError(t, err, got.Lefts[i])
		require.InDelta(t, m.Left, left, 0.01, "mark %d drawn where it belongs", i)
	}
	for i := 1; i < len(got.Marks); i++ {
		require.Greater(t, got.Marks[i].T, got.Marks[i-1].T, "marks in order")
	}

	// The video plays: metadata, then its time advances.
	var v struct {
		Ready    int     `json:"ready"`
		Duration float64 `json:"duration"`
		Finite   bool    `json:"finite"`
		Time     float64 `json:"time"`
		Err      string  `json:"err"`
	}
	videoState := `(() => { const v = document.getElementById('video'); return {ready: v.readyState, duration: isFinite(v.duration) ? v.duration : -1, finite: isFinite(v.duration), time: v.currentTime, err: v.error ? String(v.error.message || v.error.code) : ''}; })()`
	waitFor(t, "the video's metadata", 30*time.Second, func() bool {
		return ch.eval(rs, videoState, &v) == nil && (v.Ready >= 1 || v.Err != "")
	})
	require.Empty(t, v.Err, "the video decodes")
	require.NoError(t, ch.eval(rs, `document.getElementById('video').play().then(() => true)`, new(bool)))
	waitFor(t, "the video playing", 30*time.Second, func() bool {
		return ch.eval(rs, videoState, &v) == nil && v.Time > 0.5
	})
	t.Logf("video: duration %.2f s (finite %v), currentTime %.2f s; recording %.2f s", v.Duration, v.Finite, v.Time, rec.Seconds)
	require.NoError(t, ch.eval(rs, `(document.getElementById('video').pause(), true)`, new(bool)))

	// A click on the fourth mark seeks the video to its moment.
	target := got.Marks[3].T
	require.NoError(t, ch.eval(rs, `(document.querySelectorAll('#timeline .mark')[3].click(), true)`, new(bool)))
	waitFor(t, "the seek to the fourth mark", 20*time.Second, func() bool {
		var seeking bool
		return ch.eval(rs, videoState, &v) == nil && ch.eval(rs, `document.getElementById('video').seeking`, &seeking) == nil &&
			!seeking && math.Abs(v.Time-target) < 0.3
	})
	shot := filepath.Join(os.TempDir(), "replay-run.png")
	sv := ch.screenshot(t, rs, `#video`, shot)
	t.Logf("screenshot %s: video variance %.0f at %.2f s (mark %q at %.2f s)", shot, sv, v.Time, got.Marks[3].Tool, target)
	require.Greater(t, sv, 10.0, "the video shows the screen, not a blank box")
}
