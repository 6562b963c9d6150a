package screen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/safefs"
	"github.com/open-bot/computer/pkg/shared"
)

// Recordings: a screen's display captured by Debian's ffmpeg (x11grab, run
// as the desktop user with that screen's DISPLAY and cookie only) to H.264
// with libx264's ultrafast preset in a fragmented MP4.
//
// Why H.264 ultrafast: a computer runs several screens on few cores, so
// CPU decides. Measured here (make bench: BenchmarkRecording, 8 fps, 20 s,
// 1280x800) libx264 ultrafast took 0.06 CPU-s per second on a terminal
// running top (12 MB/min) and 0.10 on full-screen noise (56 MB/min); VP9
// realtime (cpu-used 8, row-mt) took 0.13 (27 MB/min) and 0.57 (151
// MB/min). A first probe at 10 fps had libx264 veryfast at 0.31 against
// ultrafast's 0.14. Chromium, Firefox and Safari all play H.264 in MP4.
//
// Why fragmented MP4 (empty moov, a fragment every second): a recorder
// killed mid-way (SIGKILL, a full disk, the display gone) still leaves a
// file that plays up to its last whole fragment; a plain MP4 would be
// unplayable without its trailer. ffmpeg writes to a pipe and botd writes
// the file whole fragment by whole fragment (fragWriter): the size cap is
// exact (ffmpeg's own -fs overshoots by a fragment) and a full disk cuts
// the file back to its last whole fragment.
//
// Files live in the portable home at desktop/screens/<id>/recordings/
// (desktop-owned, like the profile beside it). A workspace export leaves
// them out unless asked (?recordings=1).

// recordingsRel is a screen's recordings directory below the home.
func recordingsRel(id string) string { return filepath.Join("desktop", "screens", id, "recordings") }

var recIDPattern = regexp.MustCompile(`^rec-[0-9]{8}T[0-9]{6}-[0-9a-f]{8}$`)

// recFree is how much room a disk must have left for a recording to start.
const recFree = 4 << 20

// recStopWait bounds how long a stop waits for ffmpeg to finish its file
// before it is killed (the file still plays: fragmented MP4).
const recStopWait = 10 * time.Second

// recFirstFrameWait bounds how long a requested stop waits for the file's
// first fragment when it has none yet: a stop right after the start still
// gives video that plays (under load, ffmpeg took over 2 s to write
// anything, and a stop at 2 s left an empty file).
const recFirstFrameWait = 15 * time.Second

// recording is one recording botd knows.
type recording struct {
	shared.Recording
	started time.Time
	proc    runner.Process
	w       *fragWriter
	f       *os.File
	// reason is set by whoever asks ffmpeg to end (guarded by recordings.mu).
	reason string
	// ready is closed once proc is set; done once ffmpeg was reaped.
	ready chan struct{}
	done  chan struct{}
}

// recordings is the manager's recordings state.
type recordings struct {
	// startMu keeps starts one at a time (one recording per screen).
	startMu sync.Mutex
	mu      sync.Mutex
	// recs are the recordings of this botd's lifetime by id; older files
	// on disk are listed from the directory.
	recs map[string]*recording
	// active is the running recording of each screen.
	active map[string]*recording
}

func (m *Manager) rec() *recordings {
	m.recOnce.Do(func() {
		m.recState = &recordings{recs: map[string]*recording{}, active: map[string]*recording{}}
		// A screen that stops ends its recording first, before anything
		// that draws on it goes.
		m.BeforeStop(func(ctx context.Context, s *Screen) { m.endRecording(ctx, s.ID, shared.RecordingStopScreenGone) })
	})
	return m.recState
}

func errRecordingNotFound(id, rid string) error {
	return shared.Errorf(http.StatusNotFound, shared.CodeRecordingNotFound, "screen %s has no recording %s", id, rid)
}

// validRecording checks a start body against the caps and fills defaults.
func validRecording(in shared.RecordingStart) (fps, secs int, bytes int64, err error) {
	fps, secs, bytes = in.FPS, in.MaxSeconds, in.MaxBytes
	if fps == 0 {
		fps = shared.RecordingDefaultFPS
	}
	if secs == 0 {
		secs = shared.RecordingDefaultSeconds
	}
	if bytes == 0 {
		bytes = shared.RecordingDefaultMaxBytes
	}
	bad := func(f string, a ...any) error {
		return shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, f, a...)
	}
	switch {
	case fps < 1 || fps > shared.RecordingMaxFPS:
		err = bad("fps must be between 1 and %d", shared.RecordingMaxFPS)
	case secs < 1 || secs > shared.RecordingMaxSecondsCap:
		err = bad("maxSeconds must be between 1 and %d", shared.RecordingMaxSecondsCap)
	case bytes < shared.RecordingMinBytes || bytes > shared.RecordingMaxBytesCap:
		err = bad("maxBytes must be between %d and %d", shared.RecordingMinBytes, int64(shared.RecordingMaxBytesCap))
	}
	return
}

func newRecordingID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "rec-" + now.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// recordArgs is ffmpeg's command line: the screen's display in, a
// fragmented MP4 out on stdout.
func recordArgs(display, fps, secs int) []string {
	return []string{"ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y",
		"-f", "x11grab", "-draw_mouse", "1", "-framerate", strconv.Itoa(fps),
		"-video_size", fmt.Sprintf("%dx%d", Width, Height), "-i", ":" + strconv.Itoa(display),
		"-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-crf", "30", "-pix_fmt", "yuv420p",
		"-g", strconv.Itoa(fps), "-threads", "1",
		"-t", strconv.Itoa(secs),
		"-f", "mp4", "-movflags", "+frag_keyframe+empty_moov+default_base_moof", "-frag_duration", "1000000",
		"pipe:1"}
}

// StartRecording starts recording screen id (the screen is started when it
// is not running).
func (m *Manager) StartRecording(ctx context.Context, id string, in shared.RecordingStart) (*shared.Recording, error) {
	fps, secs, maxBytes, err := validRecording(in)
	if err != nil {
		return nil, err
	}
	rc := m.rec()
	var out *shared.Recording
	// Recording only watches the screen (like a view-only viewer): it needs
	// no lease, and one that is named must be the screen's.
	if err := ValidID(id); err != nil {
		return nil, err
	}
	if in.LeaseID != "" {
		if _, err := m.leases.Check(id, in.LeaseID); err != nil {
			return nil, err
		}
	}
	s, err := m.Ensure(ctx, id)
	if err != nil {
		return nil, err
	}
	err = func() error {
		rc.startMu.Lock()
		defer rc.startMu.Unlock()
		rc.mu.Lock()
		if a := rc.active[id]; a != nil {
			rc.mu.Unlock()
			return shared.Errorf(http.StatusConflict, shared.CodeRecordingRunning, "screen %s is already recording (%s); stop it first", id, a.ID)
		}
		rc.mu.Unlock()
		m.mu.Lock()
		st, slot := s.stack, s.slot
		m.mu.Unlock()
		ps, ok := st.(*procStack)
		if !ok || slot < 0 {
			return errUnavailable(id, "is not running")
		}
		u := m.o.Desktop
		rel := recordingsRel(id)
		if err := safefs.EnsureDir(m.o.Home, rel, 0o700, int(u.UID), int(u.GID)); err != nil {
			return err
		}
		dir := filepath.Join(m.o.Home, rel)
		var sfs unix.Statfs_t
		if err := unix.Statfs(dir, &sfs); err == nil && int64(sfs.Bavail)*int64(sfs.Bsize) < recFree {
			return shared.Errorf(http.StatusInsufficientStorage, shared.CodeDiskFull, "the disk that holds screen %s's recordings has less than %d bytes free", id, recFree)
		}
		now := time.Now()
		r := &recording{Recording: shared.Recording{
			ID: newRecordingID(now), Screen: id, State: shared.RecordingStateRecording,
			StartedAt: now.UTC().Format(time.RFC3339Nano), FPS: fps, MaxSeconds: secs, MaxBytes: maxBytes,
			Codec: shared.RecordingCodec, MediaType: shared.RecordingMediaType,
		}, started: now, ready: make(chan struct{}), done: make(chan struct{})}
		f, err := createRecording(m.o.Home, rel, r.ID+".mp4", int(u.UID), int(u.GID))
		if err != nil {
			return err
		}
		r.f = f
		r.w = &fragWriter{f: f, limit: maxBytes, frame: make(chan struct{}), end: func(reason string, err error) {
			rc.mu.Lock()
			if r.reason == "" {
				r.reason = reason
				if err != nil {
					r.Error = err.Error()
				}
			}
			rc.mu.Unlock()
			r.ask(context.Background())
		}}
		stderr := &capWriter{max: 4 << 10}
		proc, err := m.o.Runner.Start(runner.Spec{
			Argv: recordArgs(m.display(slot), fps, secs),
			User: &u, Env: (&procBackend{m: m}).env(slot, ps.runDir), Dir: m.DesktopHome(), Stdout: r.w, Stderr: stderr,
		})
		if err != nil {
			f.Close()
			return fmt.Errorf("recording: start ffmpeg: %w", err)
		}
		r.proc = proc
		close(r.ready)
		rc.mu.Lock()
		rc.recs[r.ID], rc.active[id] = r, r
		out = r.snapshot(m.o.Home)
		rc.mu.Unlock()
		go m.waitRecording(r, stderr)
		m.log.Info().Str("screen", id).Str("recording", r.ID).Int("fps", fps).Int("max_seconds", secs).Int64("max_bytes", maxBytes).Msg("recording started")
		return nil
	}()
	return out, err
}

// waitRecording reaps ffmpeg and notes why it ended.
func (m *Manager) waitRecording(r *recording, stderr *capWriter) {
	code, werr := r.proc.Wait()
	rc := m.rec()
	size := r.w.size()
	_ = r.f.Close()
	elapsed := time.Since(r.started)
	msg := strings.TrimSpace(stderr.buf.String())
	rc.mu.Lock()
	reason := r.reason
	switch {
	case reason == shared.RecordingStopDiskFull:
		r.Error = "the disk that holds the recording is full: " + r.Error
	case reason != "":
	case code == 0:
		// ffmpeg ends on its own only at -t.
		reason = shared.RecordingStopMaxSeconds
	default:
		// x11grab fails when its display went away under it.
		reason = shared.RecordingStopScreenGone
		if !strings.Contains(msg, "Cannot open display") && !strings.Contains(msg, "X11") && !strings.Contains(msg, "xcb") {
			reason = shared.RecordingStopFailed
			r.Error = fmt.Sprintf("ffmpeg exited %d: %s", code, lastLine(msg))
			if werr != nil {
				r.Error = werr.Error()
			}
		}
	}
	r.State, r.StopReason = shared.RecordingStateStopped, reason
	r.EndedAt = time.Now().UTC().Format(time.RFC3339Nano)
	r.Seconds = elapsed.Seconds()
	r.Bytes = size
	if rc.active[r.Screen] == r {
		delete(rc.active, r.Screen)
	}
	rc.mu.Unlock()
	close(r.done)
	ev := m.log.Info()
	if reason == shared.RecordingStopFailed || reason == shared.RecordingStopDiskFull {
		ev = m.log.Warn().Str("error", r.Error)
	}
	ev.Str("screen", r.Screen).Str("recording", r.ID).Str("reason", reason).Int64("bytes", size).Msg("recording ended")
	m.publish("recording", map[string]any{"screen": r.Screen, "id": r.ID, "state": r.State, "stopReason": reason})
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func fileSize(path string) int64 {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0
	}
	return st.Size
}

// snapshot is the recording as an answer (rc.mu held).
func (r *recording) snapshot(home string) *shared.Recording {
	out := r.Recording
	if out.State == shared.RecordingStateRecording {
		out.Seconds = time.Since(r.started).Seconds()
		out.Bytes = r.w.size()
	}
	return &out
}

// ask ends r's ffmpeg cleanly (SIGINT: it writes its last fragment), then
// kills it after recStopWait, and waits until it was reaped.
func (r *recording) ask(ctx context.Context) {
	<-r.ready
	_ = r.proc.SignalGroup(syscall.SIGINT)
	t := time.NewTimer(recStopWait)
	defer t.Stop()
	select {
	case <-r.done:
		return
	case <-t.C:
	case <-ctx.Done():
	}
	_ = r.proc.SignalGroup(syscall.SIGKILL)
	<-r.done
}

// endRecording ends screen id's running recording, if any, for reason.
func (m *Manager) endRecording(ctx context.Context, id, reason string) {
	rc := m.rec()
	rc.mu.Lock()
	r := rc.active[id]
	if r != nil && r.reason == "" {
		r.reason = reason
	}
	rc.mu.Unlock()
	if r != nil {
		r.ask(ctx)
	}
}

// StopRecording stops recording rid of screen id. A recording that already
// ended answers recording_ended with its reason.
func (m *Manager) StopRecording(ctx context.Context, id, rid string) (*shared.Recording, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	rc := m.rec()
	rc.mu.Lock()
	r := rc.recs[rid]
	if r == nil || r.Screen != id {
		rc.mu.Unlock()
		if m.onDisk(id, rid) {
			return nil, shared.Errorf(http.StatusConflict, shared.CodeRecordingEnded, "recording %s already ended", rid)
		}
		return nil, errRecordingNotFound(id, rid)
	}
	if r.State != shared.RecordingStateRecording {
		why := r.StopReason
		rc.mu.Unlock()
		return nil, shared.Errorf(http.StatusConflict, shared.CodeRecordingEnded, "recording %s already ended: %s", rid, describeReason(why))
	}
	if r.reason == "" {
		r.reason = shared.RecordingStopRequested
	}
	rc.mu.Unlock()
	// Not before the file has video (bounded): see recFirstFrameWait.
	t := time.NewTimer(recFirstFrameWait)
	select {
	case <-r.w.frame:
	case <-r.done:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	r.ask(ctx)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return r.snapshot(m.o.Home), nil
}

func describeReason(r string) string {
	switch r {
	case shared.RecordingStopMaxSeconds:
		return "it reached its maxSeconds cap (max_seconds)"
	case shared.RecordingStopMaxBytes:
		return "it reached its maxBytes cap (max_bytes)"
	case shared.RecordingStopDiskFull:
		return "the disk was full (disk_full)"
	case shared.RecordingStopScreenGone:
		return "its screen stopped (screen_gone)"
	case shared.RecordingStopRequested:
		return "it was stopped (requested)"
	}
	return r
}

// onDisk reports whether rid's file is in screen id's recordings.
func (m *Manager) onDisk(id, rid string) bool {
	if !recIDPattern.MatchString(rid) {
		return false
	}
	return fileSize(filepath.Join(m.o.Home, recordingsRel(id), rid+".mp4")) > 0
}

// Recordings lists screen id's recordings, oldest first: this botd's with
// their state, and files left from before it started.
func (m *Manager) Recordings(id string) ([]shared.Recording, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	rc := m.rec()
	out := []shared.Recording{}
	seen := map[string]bool{}
	rc.mu.Lock()
	for _, r := range rc.recs {
		if r.Screen == id {
			out = append(out, *r.snapshot(m.o.Home))
			seen[r.ID] = true
		}
	}
	rc.mu.Unlock()
	ents, _ := os.ReadDir(filepath.Join(m.o.Home, recordingsRel(id)))
	for _, e := range ents {
		rid, ok := strings.CutSuffix(e.Name(), ".mp4")
		if !ok || seen[rid] || !recIDPattern.MatchString(rid) || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		started, _ := time.Parse("20060102T150405", rid[4:19])
		out = append(out, shared.Recording{ID: rid, Screen: id, State: shared.RecordingStateStopped,
			StartedAt: started.UTC().Format(time.RFC3339Nano), EndedAt: fi.ModTime().UTC().Format(time.RFC3339Nano),
			Bytes: fi.Size(), Codec: shared.RecordingCodec, MediaType: shared.RecordingMediaType})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// createRecording creates the new file name in the directory rel below
// home, owned by the desktop user (O_EXCL|O_NOFOLLOW from the directory's
// fd: desktop owns the directory and may have planted a link).
func createRecording(home, rel, name string, uid, gid int) (*os.File, error) {
	dfd, err := safefs.OpenDirBelow(home, rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("recording: create %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := f.Chown(uid, gid); err != nil {
		f.Close()
		return nil, fmt.Errorf("recording: chown %s: %w", name, err)
	}
	return f, nil
}

// openRecording opens rid's file without following a link (desktop owns
// the directory).
func (m *Manager) openRecording(id, rid string) (*os.File, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	if !recIDPattern.MatchString(rid) {
		return nil, errRecordingNotFound(id, rid)
	}
	dfd, err := safefs.OpenDirBelow(m.o.Home, recordingsRel(id))
	if err != nil {
		return nil, errRecordingNotFound(id, rid)
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, rid+".mp4", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, errRecordingNotFound(id, rid)
	}
	f := os.NewFile(uintptr(fd), rid+".mp4")
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, errRecordingNotFound(id, rid)
	}
	return f, nil
}

// DeleteRecording removes rid (a running one is stopped first).
func (m *Manager) DeleteRecording(ctx context.Context, id, rid string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	rc := m.rec()
	rc.mu.Lock()
	r := rc.recs[rid]
	if r != nil && r.Screen == id && r.reason == "" && r.State == shared.RecordingStateRecording {
		r.reason = shared.RecordingStopRequested
	}
	rc.mu.Unlock()
	if r != nil && r.Screen == id {
		r.ask(ctx)
	}
	f, err := m.openRecording(id, rid)
	if err != nil {
		return err
	}
	f.Close()
	dfd, err := safefs.OpenDirBelow(m.o.Home, recordingsRel(id))
	if err != nil {
		return errRecordingNotFound(id, rid)
	}
	defer unix.Close(dfd)
	if err := unix.Unlinkat(dfd, rid+".mp4", 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete recording %s: %w", rid, err)
	}
	rc.mu.Lock()
	if rc.recs[rid] == r {
		delete(rc.recs, rid)
	}
	rc.mu.Unlock()
	return nil
}

// recordRoutes registers the /screens/{id}/recordings routes.
func (m *Manager) recordRoutes(mux *http.ServeMux) {
	m.rec()
	mux.HandleFunc("POST /screens/{id}/recordings", m.handleRecordStart)
	mux.HandleFunc("GET /screens/{id}/recordings", m.handleRecordList)
	mux.HandleFunc("POST /screens/{id}/recordings/{rid}/stop", m.handleRecordStop)
	mux.HandleFunc("GET /screens/{id}/recordings/{rid}", m.handleRecordGet)
	mux.HandleFunc("GET /screens/{id}/recordings/{rid}/video", m.handleRecordDownload)
	mux.HandleFunc("DELETE /screens/{id}/recordings/{rid}", m.handleRecordDelete)
}

func (m *Manager) handleRecordStart(w http.ResponseWriter, r *http.Request) {
	// The screen need not be known yet: a start starts it.
	var req shared.RecordingStart
	if err := httpx.DecodeJSON(w, r, &req, 0); err != nil {
		m.fail(w, r, err)
		return
	}
	rec, err := m.StartRecording(r.Context(), r.PathValue("id"), req)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, rec)
}

func (m *Manager) handleRecordList(w http.ResponseWriter, r *http.Request) {
	recs, err := m.Recordings(r.PathValue("id"))
	if err != nil {
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, shared.Recordings{Recordings: recs})
}

func (m *Manager) handleRecordGet(w http.ResponseWriter, r *http.Request) {
	id, rid := r.PathValue("id"), r.PathValue("rid")
	recs, err := m.Recordings(id)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	for _, rec := range recs {
		if rec.ID == rid {
			httpx.WriteJSON(w, http.StatusOK, rec)
			return
		}
	}
	m.fail(w, r, errRecordingNotFound(id, rid))
}

func (m *Manager) handleRecordStop(w http.ResponseWriter, r *http.Request) {
	rec, err := m.StopRecording(r.Context(), r.PathValue("id"), r.PathValue("rid"))
	if err != nil {
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, rec)
}

// handleRecordDownload streams the file (Range requests answered; a
// running recording is served as far as it is written).
func (m *Manager) handleRecordDownload(w http.ResponseWriter, r *http.Request) {
	id, rid := r.PathValue("id"), r.PathValue("rid")
	f, err := m.openRecording(id, rid)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	defer f.Close()
	fi, _ := f.Stat()
	w.Header().Set("Content-Type", shared.RecordingMediaType)
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", rid+".mp4"))
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

func (m *Manager) handleRecordDelete(w http.ResponseWriter, r *http.Request) {
	id, rid := r.PathValue("id"), r.PathValue("rid")
	if err := m.DeleteRecording(r.Context(), id, rid); err != nil {
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"id": rid, "deleted": true})
}
