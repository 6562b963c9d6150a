package desktop

import (
	"github.com/open-bot/computer/apps/worker/internal/rfb"

	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"image"
	_ "image/jpeg" // DecodeConfig of the screenshot
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
	"github.com/open-bot/computer/pkg/shared/fifo"
)

// screen is one screen's state in the worker. slot, running, width and
// height are guarded by Machine.mu; the rest by inMu.
type screen struct {
	id            string
	slot          int
	running       bool
	width, height int
	// stream is the worker's held RFB session to the screen (guarded by
	// the machine's mu; nil unless Options.HeldStream).
	stream *rfb.Stream
	// held makes the held stream's JPEGs (held.go); settledAt is when the
	// last act's settle ended (touched only by the lease-holding call q
	// admits).
	held      heldJPEG
	settledAt time.Time

	// q runs one lease-holding call at a time, in arrival order.
	q fifo.Lock

	// inMu guards gen, inflight, nextTicket, lastHash and lastLease.
	inMu       sync.Mutex
	gen        uint64
	inflight   map[int]context.CancelCauseFunc
	nextTicket int
	lastHash   string
	lastLease  string
}

type session struct {
	leaseID string
	gen     uint64
}

type sessionKey struct{}

func sessionFrom(ctx context.Context) *session {
	s, _ := ctx.Value(sessionKey{}).(*session)
	return s
}

func (s *screen) begin(ctx context.Context, leaseID string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	s.inMu.Lock()
	t := s.nextTicket
	s.nextTicket++
	s.inflight[t] = cancel
	sess := &session{leaseID: leaseID, gen: s.gen}
	s.inMu.Unlock()
	return context.WithValue(ctx, sessionKey{}, sess), func() {
		s.inMu.Lock()
		delete(s.inflight, t)
		s.inMu.Unlock()
		cancel(context.Canceled)
	}
}

// cutOff bumps the input generation and cancels every in-flight call.
func (s *screen) cutOff(cause error) {
	s.inMu.Lock()
	s.gen++
	s.lastHash, s.lastLease = "", ""
	for _, c := range s.inflight {
		c(cause)
	}
	s.inMu.Unlock()
}

// ctxErr maps a cut-off call's context to what its holder sees.
func (m *Machine) ctxErr(ctx context.Context, id string, err error) error {
	if ctx.Err() == nil {
		return err
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errPreempted):
		return apiErr(http.StatusConflict, shared.CodeUserHasControl, "a user took control of screen %s", id)
	case errors.Is(cause, errStopped):
		return errUnavailable(id, "was stopped")
	}
	return err
}

// held fails unless ctx's session still holds the screen: the same input
// generation and the same current lease, which it renews. It runs right
// before anything captured is returned, so no frame of a screen a person
// took reaches an agent.
func (m *Machine) held(ctx context.Context, s *screen) error {
	if ctx.Err() != nil {
		return m.ctxErr(ctx, s.id, ctx.Err())
	}
	sess := sessionFrom(ctx)
	if sess == nil {
		return apiErr(http.StatusConflict, shared.CodeLeaseRequired, "no lease")
	}
	if err := m.leases.check(s.id, sess.leaseID); err != nil {
		return err
	}
	s.inMu.Lock()
	gen := s.gen
	s.inMu.Unlock()
	if gen != sess.gen {
		return errUnavailable(s.id, "was stopped")
	}
	return nil
}

// withLease runs fn on screen id under leaseID, after every earlier call
// on that screen (FIFO), with the screen running; botd's WithLease.
func (m *Machine) withLease(ctx context.Context, id, leaseID string, fn func(ctx context.Context, s *screen) error) error {
	if err := validID(id); err != nil {
		return err
	}
	s := m.get(id)
	if s == nil {
		return notFound(id)
	}
	if err := m.leases.check(id, leaseID); err != nil {
		return err
	}
	release, err := s.q.Acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	if err := m.leases.check(id, leaseID); err != nil {
		return err
	}
	rs, err := m.ensure(ctx, id)
	if err != nil {
		return err
	}
	if rs != s {
		return notFound(id)
	}
	actx, done := s.begin(ctx, leaseID)
	defer done()
	if err := m.leases.check(id, leaseID); err != nil {
		return err
	}
	return m.ctxErr(actx, id, fn(actx, s))
}

// captureScript prints the pointer (xdotool's --shell form) on stderr and
// the screenshot, pointer drawn in, as a quality-72 JPEG (botd's quality)
// on stdout: one command per observation.
const captureScript = `f="${TMPDIR:-/tmp}/open-bot-shot-$$.jpg"
trap 'rm -f "$f"' EXIT
xdotool getmouselocation --shell >&2 || exit 3
scrot --pointer --quality 72 --overwrite "$f" >/dev/null 2>&1 || scrot -p -q 72 -o "$f" || exit 4
cat "$f"`

type frame struct {
	jpeg          []byte
	width, height int
	pointer       shared.Point
	hash          string
}

// errCutShort is a screenshot whose JPEG does not end with the
// end-of-image marker: its tail was lost on the way (a vendor's answer,
// an exec's output). It is taken again, up to three times in all.
var errCutShort = errors.New("the JPEG is cut short (no end-of-image marker)")

// capture takes one screenshot of s through the backend: a JPEG cut
// short is taken again, up to three times, and then is an error, never a
// frame.
func (m *Machine) capture(ctx context.Context, s *screen) (frame, error) {
	return retryCutShort(ctx, func() (frame, error) { return m.captureOnce(ctx, s) }, func(try int, err error) {
		m.o.Log.Warn().Str("screen", s.id).Int("try", try).Err(err).Msg("screenshot cut short; taking it again")
	})
}

// retryCutShort calls take until it returns anything but errCutShort, at
// most three times (warn is told of each retry).
func retryCutShort(ctx context.Context, take func() (frame, error), warn func(try int, err error)) (frame, error) {
	for try := 1; ; try++ {
		f, err := take()
		if !errors.Is(err, errCutShort) || try == 3 || ctx.Err() != nil {
			return f, err
		}
		warn(try, err)
	}
}

// checkWhole is errCutShort unless b ends with JPEG's end-of-image marker
// (NUL padding after it aside).
func checkWhole(b []byte) error {
	if !bytes.HasSuffix(bytes.TrimRight(b, "\x00"), []byte{0xff, 0xd9}) {
		return errCutShort
	}
	return nil
}

// captureOnce takes one screenshot of s through the backend.
func (m *Machine) captureOnce(ctx context.Context, s *screen) (frame, error) {
	m.mu.Lock()
	slot := s.slot
	m.mu.Unlock()
	f, held := m.streamFrame(ctx, s)
	sa := m.screenAPI(slot)
	switch {
	case held:
		// The held stream's frame (held.go).
	case sa != nil:
		img, p, err := sa.Screenshot(ctx)
		if err != nil {
			return frame{}, fmt.Errorf("screenshot of %s: %w", m.display(slot), err)
		}
		f = frame{jpeg: img, pointer: p}
	default:
		r, err := m.b.Exec(ctx, Cmd{Argv: []string{"sh", "-c", captureScript}, User: m.o.User, Cwd: m.o.Home,
			Env: m.displayEnv(slot), MaxOutput: 32 << 20})
		if err != nil {
			return frame{}, err
		}
		if r.ExitCode != 0 {
			return frame{}, fmt.Errorf("screenshot of %s failed (exit %d): %s", m.display(slot), r.ExitCode, firstLine(r.Stderr))
		}
		p, _ := mouseShell(r.Stderr)
		f = frame{jpeg: r.Stdout, pointer: p}
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(f.jpeg))
	if err != nil || format != "jpeg" {
		return frame{}, fmt.Errorf("screenshot of %s is not a JPEG (%d bytes): %v", m.display(slot), len(f.jpeg), err)
	}
	if err := checkWhole(f.jpeg); err != nil {
		return frame{}, fmt.Errorf("screenshot of %s (%d bytes): %w", m.display(slot), len(f.jpeg), err)
	}
	f.width, f.height = cfg.Width, cfg.Height
	h := fnv.New64a()
	h.Write(f.jpeg)
	fmt.Fprintf(h, "|%d,%d", f.pointer.X, f.pointer.Y)
	f.hash = fmt.Sprintf("%016x", h.Sum64())
	return f, nil
}

// mouseShell is the pointer in `xdotool getmouselocation --shell`'s
// output; ok says both X and Y were there.
func mouseShell(out []byte) (p shared.Point, ok bool) {
	var x, y bool
	for _, line := range strings.Split(string(out), "\n") {
		k, v, found := strings.Cut(strings.TrimSpace(line), "=")
		if !found {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			continue
		}
		switch k {
		case "X":
			p.X, x = n, true
		case "Y":
			p.Y, y = n, true
		}
	}
	return p, x && y
}

// observe captures s for ctx's session: a frame identical to the last one
// returned to the same lease comes back unchanged, without image bytes;
// nothing is returned when the lease changed meanwhile.
func (m *Machine) observe(ctx context.Context, s *screen) (client.Observation, error) {
	f, err := m.capture(ctx, s)
	if err != nil {
		return client.Observation{}, m.ctxErr(ctx, s.id, err)
	}
	if err := m.held(ctx, s); err != nil {
		return client.Observation{}, err
	}
	sess := sessionFrom(ctx)
	obs := client.Observation{Width: f.width, Height: f.height, Pointer: f.pointer, FrameHash: f.hash, Blocked: json.RawMessage("[]")}
	s.inMu.Lock()
	if sess != nil && s.lastLease == sess.leaseID && s.lastHash == f.hash {
		obs.Unchanged = true
	} else {
		obs.Image = base64.StdEncoding.EncodeToString(f.jpeg)
	}
	if sess != nil {
		s.lastHash, s.lastLease = f.hash, sess.leaseID
	}
	s.inMu.Unlock()
	return obs, nil
}

// Observe is one screenshot under the lease.
func (m *Machine) Observe(ctx context.Context, id, leaseID string) (client.Observation, error) {
	var obs client.Observation
	err := m.withLease(ctx, id, leaseID, func(ctx context.Context, s *screen) error {
		var err error
		obs, err = m.observe(ctx, s)
		return err
	})
	return obs, err
}

type actionResult struct {
	Index int               `json:"index"`
	Type  string            `json:"type"`
	OK    bool              `json:"ok"`
	Error *shared.ErrorBody `json:"error,omitempty"`
}

// Act runs a validated batch in order under the lease, as botd does: after
// each action the screen settles for Action.Settle() before the next
// action or the capture; an action that fails ends the batch (its error in
// its result, the observation still returned); preemption ends the whole
// call with user_has_control and no frame.
func (m *Machine) Act(ctx context.Context, id, leaseID string, actions []shared.Action) (client.ActResult, error) {
	var out client.ActResult
	err := m.withLease(ctx, id, leaseID, func(ctx context.Context, s *screen) error {
		m.mu.Lock()
		w, h := s.width, s.height
		m.mu.Unlock()
		if err := shared.ValidateActions(actions, w, h); err != nil {
			return apiErr(http.StatusBadRequest, shared.CodeInvalidAction, "%s", err.Error())
		}
		for _, a := range actions {
			if shared.IsWindowAction(a.Type) {
				return errNeedsBotd("window actions")
			}
		}
		results := make([]actionResult, 0, len(actions))
		for i, a := range actions {
			if err := m.held(ctx, s); err != nil {
				return err
			}
			err := m.do(ctx, s, a)
			if err != nil {
				if ctx.Err() != nil {
					return m.ctxErr(ctx, id, err)
				}
				var ce *client.Error
				if errors.As(err, &ce) {
					return err
				}
				results = append(results, actionResult{Index: i, Type: a.Type, Error: &shared.ErrorBody{Code: shared.CodeInternal, Message: "the action failed; the batch stopped here: " + err.Error()}})
				break
			}
			results = append(results, actionResult{Index: i, Type: a.Type, OK: true})
			if err := sleepCtx(ctx, a.Settle()); err != nil {
				return m.ctxErr(ctx, id, err)
			}
		}
		// The observation shows the screen after the settle: the held
		// stream's frame must be newer (streamFrame).
		s.settledAt = time.Now()
		obs, err := m.observe(ctx, s)
		if err != nil {
			return err
		}
		b, err := json.Marshal(results)
		if err != nil {
			return err
		}
		out = client.ActResult{Results: b, Observation: obs}
		return nil
	})
	return out, err
}

// do performs one action on s through xdotool.
func (m *Machine) do(ctx context.Context, s *screen, a shared.Action) error {
	m.mu.Lock()
	slot := s.slot
	m.mu.Unlock()
	run := func(argv []string) error {
		r, err := m.b.Exec(ctx, Cmd{Argv: argv, User: m.o.User, Cwd: m.o.Home, Env: m.displayEnv(slot)})
		if err != nil {
			return err
		}
		if r.ExitCode != 0 {
			return fmt.Errorf("%s exited %d: %s", argv[1], r.ExitCode, firstLine(r.Stderr))
		}
		return nil
	}
	sa := m.screenAPI(slot)
	switch a.Type {
	case shared.ActionScreenshot:
		return nil // the batch's observation is the screenshot
	case shared.ActionWait:
		return sleepCtx(ctx, time.Duration(*a.Ms)*time.Millisecond)
	case shared.ActionType:
		for i, chunk := range typeChunks(*a.Text) {
			if i > 0 {
				if err := m.held(ctx, s); err != nil {
					return err
				}
			}
			c := chunk
			if ok, err := m.streamInput(ctx, s, shared.Action{Type: shared.ActionType, Text: &c}); ok {
				if err != nil {
					return err
				}
				continue
			}
			if sa != nil {
				if ok, err := sa.Input(ctx, shared.Action{Type: shared.ActionType, Text: &c}); ok {
					if err != nil {
						return err
					}
					continue
				}
			}
			for _, tr := range typeRuns(chunk) {
				if err := run([]string{"xdotool", "type", "--delay", strconv.Itoa(tr.delayMs), "--", tr.text}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if ok, err := m.streamInput(ctx, s, a); ok {
		return err
	}
	if sa != nil {
		if ok, err := sa.Input(ctx, a); ok {
			return err
		}
	}
	argv, err := xdotoolArgv(a)
	if err != nil {
		return err
	}
	return run(argv)
}

// startScript brings slot's stack up, idempotently: Xvfb on the display
// (unless one answers there already), an XFCE session on a display it
// started, and two x11vnc (view-only and control) behind websockify on the
// view and control ports. Like botd, it waits (at most 30 s) until the
// window manager manages two windows (the panel and the desktop) and a
// moment more for them to paint, so a fresh screen's first observation
// shows a desktop. It prints the display's geometry.
const startScript = `set -u
d="$1"; w="$2"; h="$3"; rv="$4"; rc="$5"; pv="$6"; pc="$7"
dir="${TMPDIR:-/tmp}/open-bot-desktop/$d"
mkdir -p "$dir"
alive() { [ -f "$dir/$1.pid" ] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }
run() { n="$1"; shift; alive "$n" && return 0; setsid "$@" >"$dir/$n.log" 2>&1 </dev/null & echo $! >"$dir/$n.pid"; }
up() { xdpyinfo -display ":$d" >/dev/null 2>&1; }
fresh=0
if ! up; then
  run xvfb Xvfb ":$d" -ac -screen 0 "${w}x${h}x24" -retro -dpi 96 -nolisten tcp
  i=0; while ! up; do i=$((i+1)); [ $i -gt 150 ] && { echo "Xvfb :$d did not come up: $(tail -n 3 "$dir/xvfb.log")" >&2; exit 1; }; sleep 0.1; done
  fresh=1
fi
export DISPLAY=":$d"
if [ $fresh = 1 ] || { [ -f "$dir/xfce.pid" ] && ! alive xfce; }; then
  rm -f "$dir/xfce.pid"
  run xfce startxfce4
fi
run vncview x11vnc -display ":$d" -rfbport "$rv" -localhost -viewonly -shared -forever -nopw -noxdamage -quiet
run vncctl x11vnc -display ":$d" -rfbport "$rc" -localhost -shared -forever -nopw -noxdamage -defer 5 -wait 10 -quiet
web=/usr/share/novnc; [ -d "$web" ] || web=/opt/noVNC
run wsview websockify --web "$web" "$pv" "localhost:$rv"
run wsctl websockify --web "$web" "$pc" "localhost:$rc"
if [ -f "$dir/xfce.pid" ]; then
  i=0; while [ "$(xprop -root _NET_CLIENT_LIST 2>/dev/null | tr ',' '\n' | grep -c 0x)" -lt 2 ]; do i=$((i+1)); [ $i -gt 300 ] && break; sleep 0.1; done
  sleep 0.3
fi
xdotool getdisplaygeometry`

// startSlot runs startScript for slot and returns the display's geometry.
func (m *Machine) startSlot(ctx context.Context, slot int) (int, int, error) {
	itoa := strconv.Itoa
	argv := []string{"sh", "-c", startScript, "sh", itoa(slot), itoa(m.o.Width), itoa(m.o.Height),
		itoa(m.rfbPort(slot)), itoa(m.rfbPort(slot) + 1), itoa(m.viewPort(slot)), itoa(m.ctlPort(slot))}
	r, err := m.b.Exec(ctx, Cmd{Argv: argv, User: m.o.User, Cwd: m.o.Home, Env: map[string]string{"HOME": m.o.Home}})
	if err != nil {
		return 0, 0, err
	}
	if r.ExitCode != 0 {
		return 0, 0, fmt.Errorf("exit %d: %s", r.ExitCode, firstLine(r.Stderr))
	}
	var w, h int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(r.Stdout)), "%d %d", &w, &h); err != nil || w <= 0 || h <= 0 {
		return 0, 0, fmt.Errorf("no geometry from %s: %q", m.display(slot), firstLine(r.Stdout))
	}
	return w, h, nil
}

// stopScript ends everything startScript started for a slot.
const stopScript = `dir="${TMPDIR:-/tmp}/open-bot-desktop/$1"
for n in wsctl wsview vncctl vncview xfce xvfb; do
  if [ -f "$dir/$n.pid" ]; then p="$(cat "$dir/$n.pid")"; kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; rm -f "$dir/$n.pid"; fi
done
exit 0`

func (m *Machine) stopSlot(ctx context.Context, slot int) error {
	r, err := m.b.Exec(ctx, Cmd{Argv: []string{"sh", "-c", stopScript, "sh", strconv.Itoa(slot)}, User: m.o.User, Cwd: m.o.Home})
	if err != nil {
		return err
	}
	if r.ExitCode != 0 {
		return fmt.Errorf("exit %d: %s", r.ExitCode, firstLine(r.Stderr))
	}
	return nil
}
