package screen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// Displays 1500–1519 and ports 34400–34799 belong to the recording tests.
const (
	recDisplayBase  = 1500
	recViewPortBase = 34400
)

// newRecIT is newIT on the recording tests' displays and ports.
func newRecIT(t testing.TB, base int) *itEnv {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTools(t, append(desktopTools, "ffmpeg", "ffprobe", "ffplay")...)
	testenv.RequireUsers(t)
	home, err := os.MkdirTemp("", "screen-rec-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })
	d, err := osuser.Lookup("desktop")
	require.NoError(t, err)
	b, err := osuser.Lookup("bot")
	require.NoError(t, err)
	require.NoError(t, osuser.PrepareDirs(osuser.Layout(home, d, b)))
	m := New(Options{Home: home, DisplayBase: base, ViewPortBase: recViewPortBase + 2*(base-recDisplayBase),
		MaxScreens: 1, Desktop: d, Log: zerolog.Nop(), ExtraEnv: itExtraEnv()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.Close(ctx)
	})
	return &itEnv{m: m, home: home, desktop: d, bot: b}
}

// recScreen starts screen id with an agent lease and returns the routes
// and the lease id.
func recScreen(t *testing.T, e *itEnv, ctx context.Context, id string) (*http.ServeMux, string) {
	t.Helper()
	mux := http.NewServeMux()
	e.m.Routes(mux)
	_, err := e.m.Register(id)
	require.NoError(t, err)
	l, err := e.m.Leases().Acquire(id, lease.Agent, "run", 10*time.Minute)
	require.NoError(t, err)
	_, err = e.m.Ensure(ctx, id)
	require.NoError(t, err)
	return mux, l.ID
}

// noise fills the screen with moving noise (a stream no encoder can
// shrink much), as the desktop user on that screen only.
func noise(t *testing.T, e *itEnv, ctx context.Context, id string) {
	t.Helper()
	_, err := e.procs(t, id).launch(ctx, "noise", []string{"ffplay", "-loglevel", "error", "-noborder", "-left", "0", "-top", "0",
		"-x", strconv.Itoa(Width), "-y", strconv.Itoa(Height), "-f", "lavfi", "-i", "nullsrc=s=320x200:r=15,geq=random(1)*255:128:128"})
	require.NoError(t, err)
}

func recList(t *testing.T, mux http.Handler, id string) []map[string]any {
	t.Helper()
	r := call(t, mux, "GET", "/screens/"+id+"/recordings", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var out []map[string]any
	for _, x := range r.body["recordings"].([]any) {
		out = append(out, x.(map[string]any))
	}
	return out
}

func recGet(t *testing.T, mux http.Handler, id, rid string) map[string]any {
	t.Helper()
	r := call(t, mux, "GET", "/screens/"+id+"/recordings/"+rid, nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	return r.body
}

// recWait polls rid until ok says so.
func recWait(t *testing.T, mux http.Handler, id, rid, what string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		r := recGet(t, mux, id, rid)
		if ok(r) {
			return r
		}
		require.True(t, time.Now().Before(deadline), "%s: the recording stayed %v", what, r)
		time.Sleep(100 * time.Millisecond)
	}
}

// playable decodes the whole file with ffmpeg and returns its decoded
// frame count; it fails the test when a frame does not decode.
func playable(t *testing.T, path string) int {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,width,height,nb_read_frames", "-of", "csv=p=0", path).CombinedOutput()
	require.NoError(t, err, "ffprobe %s: %s", path, out)
	f := strings.Split(strings.TrimSpace(string(out)), ",")
	require.Len(t, f, 4, "ffprobe: %s", out)
	require.Equal(t, []string{"h264", "1280", "800"}, f[:3], "ffprobe: %s", out)
	n, err := strconv.Atoi(f[3])
	require.NoError(t, err, "ffprobe: %s", out)
	dec, err := exec.Command("ffmpeg", "-v", "error", "-i", path, "-f", "null", "-").CombinedOutput()
	require.NoError(t, err, "decode %s: %s", path, dec)
	require.Empty(t, strings.TrimSpace(string(dec)), "decoding %s reported errors", path)
	return n
}

// leaseIntact checks the screen still answers its lease holder.
func leaseIntact(t *testing.T, mux http.Handler, id, leaseID string) {
	t.Helper()
	r := call(t, mux, "POST", "/screens/"+id+"/observe", map[string]any{"leaseId": leaseID})
	require.Equal(t, http.StatusOK, r.status, r.body)
}

func recFile(e *itEnv, id, rid string) string {
	return filepath.Join(e.home, recordingsRel(id), rid+".mp4")
}

// TestIntegrationRecording: start, a second start refused, list, stop,
// a second stop refused with the reason, download whole and by range (an
// H.264 file every frame of which decodes), unknown ids, delete; the
// screen and its lease unharmed throughout.
func TestIntegrationRecording(t *testing.T) {
	e := newRecIT(t, recDisplayBase)
	ctx := testenv.Context(t, 4*time.Minute)
	mux, lid := recScreen(t, e, ctx, "rec")

	r := call(t, mux, "POST", "/screens/rec/recordings", map[string]any{"leaseId": "nope", "fps": 10})
	require.Equal(t, http.StatusConflict, r.status, r.body) // not the lease holder
	r = call(t, mux, "POST", "/screens/rec/recordings", map[string]any{"leaseId": lid, "fps": 99})
	require.Equal(t, http.StatusBadRequest, r.status, r.body)
	r = call(t, mux, "POST", "/screens/rec/recordings", map[string]any{"leaseId": lid, "maxBytes": 1000})
	require.Equal(t, http.StatusBadRequest, r.status, r.body)

	r = call(t, mux, "POST", "/screens/rec/recordings", map[string]any{"leaseId": lid, "fps": 10})
	require.Equal(t, http.StatusOK, r.status, r.body)
	rid := r.body["id"].(string)
	require.Equal(t, "recording", r.body["state"])
	require.Equal(t, "h264", r.body["codec"])

	r = call(t, mux, "POST", "/screens/rec/recordings", map[string]any{"leaseId": lid})
	require.Equal(t, http.StatusConflict, r.status, r.body)
	require.Equal(t, string(shared.CodeRecordingRunning), r.code(), r.body)

	// Something happens on the screen while it records.
	r = call(t, mux, "POST", "/screens/rec/launch", map[string]any{"leaseId": lid, "app": "editor"})
	require.Equal(t, http.StatusOK, r.status, r.body)
	r = call(t, mux, "POST", "/screens/rec/act", map[string]any{"leaseId": lid, "actions": []any{
		map[string]any{"type": "wait", "ms": 1500}, map[string]any{"type": "type", "text": "recorded words"}, map[string]any{"type": "wait", "ms": 1500}}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	recWait(t, mux, "rec", rid, "fragments written", func(m map[string]any) bool { return m["bytes"].(float64) > 0 })

	list := recList(t, mux, "rec")
	require.Len(t, list, 1)
	require.Equal(t, rid, list[0]["id"])

	r = call(t, mux, "POST", "/screens/rec/recordings/"+rid+"/stop", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "stopped", r.body["state"])
	require.Equal(t, "requested", r.body["stopReason"])
	require.Greater(t, r.body["bytes"].(float64), 0.0)
	r = call(t, mux, "POST", "/screens/rec/recordings/"+rid+"/stop", nil)
	require.Equal(t, http.StatusConflict, r.status, r.body)
	require.Equal(t, string(shared.CodeRecordingEnded), r.code(), r.body)
	require.Contains(t, r.message(), "requested")

	// Download: whole, then a range.
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/screens/rec/recordings/" + rid + "/video")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "video/mp4", resp.Header.Get("Content-Type"))
	dl := filepath.Join(t.TempDir(), "dl.mp4")
	require.NoError(t, os.WriteFile(dl, body, 0o600))
	frames := playable(t, dl)
	require.Greater(t, frames, 10, "3 s at 10 fps")
	req, _ := http.NewRequest("GET", srv.URL+"/screens/rec/recordings/"+rid+"/video", nil)
	req.Header.Set("Range", "bytes=4-11")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusPartialContent, resp.StatusCode)
	require.Equal(t, body[4:12], part)
	require.Equal(t, "ftyp", string(part[:4]))

	for _, p := range []string{"/screens/rec/recordings/rec-20200101T000000-00000000/video", "/screens/rec/recordings/../../etc/passwd/video", "/screens/rec/recordings/rec-x"} {
		r = call(t, mux, "GET", p, nil)
		require.Contains(t, []int{http.StatusNotFound, http.StatusMovedPermanently, http.StatusTemporaryRedirect}, r.status, p)
	}
	r = call(t, mux, "POST", "/screens/rec/recordings/rec-20200101T000000-00000000/stop", nil)
	require.Equal(t, http.StatusNotFound, r.status, r.body)
	require.Equal(t, string(shared.CodeRecordingNotFound), r.code())
	leaseIntact(t, mux, "rec", lid)

	r = call(t, mux, "DELETE", "/screens/rec/recordings/"+rid, nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	r = call(t, mux, "GET", "/screens/rec/recordings/"+rid+"/video", nil)
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, string(shared.CodeRecordingNotFound), r.code())
	require.NoFileExists(t, recFile(e, "rec", rid))
	require.Empty(t, recList(t, mux, "rec"))
	leaseIntact(t, mux, "rec", lid)

	// A stop right after the start still leaves video that plays: the stop
	// waits for the file's first fragment (the OSWorld guest API stops
	// 2 s after its start; under load ffmpeg had written nothing by then).
	r = call(t, mux, "POST", "/screens/rec/recordings", map[string]any{"leaseId": lid, "fps": 10})
	require.Equal(t, http.StatusOK, r.status, r.body)
	quick := r.body["id"].(string)
	r = call(t, mux, "POST", "/screens/rec/recordings/"+quick+"/stop", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "requested", r.body["stopReason"])
	require.Greater(t, r.body["bytes"].(float64), 0.0, "a stop right after the start left an empty file")
	require.Positive(t, playable(t, recFile(e, "rec", quick)))
	leaseIntact(t, mux, "rec", lid)
}

// TestIntegrationRecordingLimits: a recording stops cleanly at its size
// cap and at its time cap (each with its reason, a file within the cap
// that decodes, and not early: the size cap leaves at most a fragment
// unused, the time-capped video covers the cap ± 1 s), ends with disk_full on a real full disk (a small tmpfs)
// and refuses to start there, a killed recorder still leaves a playable
// file, and a screen that stops ends its recording with screen_gone; the
// screen and its lease unharmed in each case.
func TestIntegrationRecordingLimits(t *testing.T) {
	e := newRecIT(t, recDisplayBase+2)
	ctx := testenv.Context(t, 5*time.Minute)
	mux, lid := recScreen(t, e, ctx, "lim")
	smallNoise(t, e, ctx, "lim")
	start := func(body map[string]any) (string, apiResp) {
		t.Helper()
		body["leaseId"] = lid
		r := call(t, mux, "POST", "/screens/lim/recordings", body)
		id, _ := r.body["id"].(string)
		return id, r
	}
	stopped := func(m map[string]any) bool { return m["state"] == "stopped" }

	// The size cap.
	const capBytes = 2 << 20
	rid, r := start(map[string]any{"fps": 15, "maxBytes": capBytes})
	require.Equal(t, http.StatusOK, r.status, r.body)
	got := recWait(t, mux, "lim", rid, "the size cap", stopped)
	require.Equal(t, "max_bytes", got["stopReason"], got)
	fi, err := os.Stat(recFile(e, "lim", rid))
	require.NoError(t, err)
	t.Logf("size cap %d: file %d bytes after %.1f s", capBytes, fi.Size(), got["seconds"].(float64))
	require.LessOrEqual(t, fi.Size(), int64(capBytes))
	// The lower bound: it stopped only when the next fragment would not
	// fit, so what it left unused is at most one fragment, taken as the
	// largest in the file. (Not "over half the cap": the file grows by
	// whole fragments, and one of full-screen noise under a loaded CI run
	// was 683 KB.) The small noise window keeps fragments steady, about
	// 180 KB, a dozen in the file: with full-screen noise one run kept
	// four, the largest 805 KB, and the fifth did not fit in the 1.27 MB
	// left, so the largest kept one did not stand for the next. A
	// recorder that stops early leaves more than a fragment unused.
	frags := fragmentSizes(t, recFile(e, "lim", rid))
	require.NotEmpty(t, frags, "the size-capped recording holds no fragment")
	largest := slices.Max(frags)
	t.Logf("size cap: fragments %v, the largest %d bytes, %d bytes unused", frags, largest, capBytes-fi.Size())
	require.LessOrEqual(t, capBytes-fi.Size(), largest,
		"the size cap left %d bytes unused, more than its largest fragment (%d bytes): it stopped while another fragment would have fit", capBytes-fi.Size(), largest)
	require.Greater(t, playable(t, recFile(e, "lim", rid)), 0)
	r = call(t, mux, "POST", "/screens/lim/recordings/"+rid+"/stop", nil)
	require.Equal(t, string(shared.CodeRecordingEnded), r.code(), r.body)
	require.Contains(t, r.message(), "max_bytes")
	leaseIntact(t, mux, "lim", lid)
	// Full-screen noise from here: the disk fills, fragments come fast.
	noise(t, e, ctx, "lim")

	// The time cap. A recording that got fewer than half its frames (the
	// capture starved on a loaded host: rehearsal 60 had 2 frames over
	// 0.4 s) is made again, up to twice; the bounds hold for the last.
	var frames int
	var span float64
	for try := 1; ; try++ {
		rid, r = start(map[string]any{"fps": 5, "maxSeconds": 2})
		require.Equal(t, http.StatusOK, r.status, r.body)
		got = recWait(t, mux, "lim", rid, "the time cap", stopped)
		require.Equal(t, "max_seconds", got["stopReason"], got)
		frames = playable(t, recFile(e, "lim", rid))
		span = videoSpan(t, recFile(e, "lim", rid))
		t.Logf("time cap 2 s, try %d: %d frames over %.2f s", try, frames, span)
		if frames >= 5 || try == 3 {
			break
		}
	}
	require.LessOrEqual(t, frames, 2*5+1, "2 s at 5 fps")
	require.Greater(t, frames, 0)
	// The lower bound too: the video covers the cap to within a second.
	require.InDelta(t, 2.0, span, 1.0, "the time-capped recording covers %.2f s, not 2 s ± 1 s", span)
	leaseIntact(t, mux, "lim", lid)

	// A killed recorder leaves a file that plays to its last fragment.
	rid, r = start(map[string]any{"fps": 10})
	require.Equal(t, http.StatusOK, r.status, r.body)
	recWait(t, mux, "lim", rid, "two fragments", func(m map[string]any) bool { return m["bytes"].(float64) > 200<<10 })
	rc := e.m.rec()
	rc.mu.Lock()
	proc := rc.recs[rid].proc
	rc.mu.Unlock()
	require.NoError(t, proc.SignalGroup(syscall.SIGKILL))
	got = recWait(t, mux, "lim", rid, "the killed recorder", stopped)
	require.Greater(t, playable(t, recFile(e, "lim", rid)), 0, "a killed recorder's file plays")
	leaseIntact(t, mux, "lim", lid)

	// A full disk: the recordings directory on a 6 MiB tmpfs.
	dir := filepath.Join(e.home, recordingsRel("lim"))
	require.NoError(t, syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=6m,mode=0700,uid=%d,gid=%d", e.desktop.UID, e.desktop.GID)))
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	rid, r = start(map[string]any{"fps": 15})
	require.Equal(t, http.StatusOK, r.status, r.body)
	got = recWait(t, mux, "lim", rid, "the full disk", stopped)
	require.Equal(t, "disk_full", got["stopReason"], got)
	require.Greater(t, playable(t, recFile(e, "lim", rid)), 0, "what fit on the disk plays")
	_, r = start(map[string]any{"fps": 15})
	require.Equal(t, http.StatusInsufficientStorage, r.status, r.body)
	require.Equal(t, string(shared.CodeDiskFull), r.code(), r.body)
	leaseIntact(t, mux, "lim", lid)
	require.NoError(t, syscall.Unmount(dir, syscall.MNT_DETACH))

	// The screen goes away under a recording.
	rid, r = start(map[string]any{"fps": 10})
	require.Equal(t, http.StatusOK, r.status, r.body)
	recWait(t, mux, "lim", rid, "a fragment", func(m map[string]any) bool { return m["bytes"].(float64) > 0 })
	require.NoError(t, e.m.Stop(ctx, "lim"))
	got = recGet(t, mux, "lim", rid)
	require.Equal(t, "stopped", got["state"], got)
	require.Equal(t, "screen_gone", got["stopReason"], got)
	require.Greater(t, playable(t, recFile(e, "lim", rid)), 0)
	r = call(t, mux, "POST", "/screens/lim/recordings/"+rid+"/stop", nil)
	require.Equal(t, string(shared.CodeRecordingEnded), r.code(), r.body)
	leaseIntact(t, mux, "lim", lid) // the lease stayed; the screen starts again
	require.Len(t, recList(t, mux, "lim"), 5)
}
