package screen

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/open-bot/computer/pkg/shared"
)

// errPreempted is the cause of an action cut off because a user took the
// screen.
var errPreempted = errors.New("preempted by a user")

// errUserHasControl is what the holder of a preempted lease gets.
func errUserHasControl(id string) error {
	return shared.Errorf(http.StatusConflict, shared.CodeUserHasControl, "a user took control of screen %s", id)
}

func errUnavailable(id, why string) error {
	return shared.Errorf(http.StatusServiceUnavailable, shared.CodeScreenUnavailable, "screen %s %s", id, why)
}

// session is one WithLease call: the lease it acts under and the input
// generation it started in. It travels in the ctx handed to fn.
type session struct {
	leaseID string
	gen     uint64
}

type sessionKey struct{}

func sessionFrom(ctx context.Context) *session {
	s, _ := ctx.Value(sessionKey{}).(*session)
	return s
}

// begin registers an in-flight action context. Cutting the screen off
// (preemption, stop) cancels it with a cause; the desktop package kills the
// input command it is running.
func (s *Screen) begin(ctx context.Context, leaseID string) (context.Context, func()) {
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

// cutOff bumps the input generation and cancels every in-flight action.
func (s *Screen) cutOff(cause error) {
	s.inMu.Lock()
	s.gen++
	for _, c := range s.inflight {
		c(cause)
	}
	s.inMu.Unlock()
}

// Generation is the screen's input generation; it changes on every
// preemption and stop.
func (s *Screen) Generation() uint64 {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	return s.gen
}

func (s *Screen) resetLastFrame() {
	s.inMu.Lock()
	s.lastHash, s.lastLease = 0, ""
	s.inMu.Unlock()
}

// Held fails unless ctx's session still holds the screen: same input
// generation and the same current lease, which it renews (use renews, so a
// long batch does not outlive its lease). Call it right before returning
// anything captured, so a frame from a screen a user took is never shown.
func (s *Screen) Held(ctx context.Context) error {
	if err := s.ctxErr(ctx); err != nil {
		return err
	}
	sess := sessionFrom(ctx)
	if sess == nil {
		return shared.Errorf(http.StatusConflict, shared.CodeLeaseRequired, "no lease")
	}
	if _, err := s.m.leases.Check(s.ID, sess.leaseID); err != nil {
		return err
	}
	s.inMu.Lock()
	gen := s.gen
	s.inMu.Unlock()
	if gen != sess.gen {
		return errUnavailable(s.ID, "was stopped")
	}
	return nil
}

// ctxErr maps a cancelled action context to the error its holder sees.
func (s *Screen) ctxErr(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errPreempted):
		return errUserHasControl(s.ID)
	case errors.Is(cause, errScreenStopped):
		return errUnavailable(s.ID, "was stopped")
	default:
		return ctx.Err()
	}
}

// translate turns a driver or context error into what callers see, and
// marks the screen crashed when its display died.
func (s *Screen) translate(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := s.ctxErr(ctx); cerr != nil {
		return cerr
	}
	if isDisplayGone(err) {
		s.m.markCrashed(s)
		return errUnavailable(s.ID, "lost its display; it restarts on next use")
	}
	var ae *shared.APIError
	if errors.As(err, &ae) {
		return err
	}
	return err
}

// Sleep waits d unless the session is cut off first.
func (s *Screen) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return s.ctxErr(ctx)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return s.ctxErr(ctx)
	}
}

// waitDrawn waits (at most DrawnTimeout after the start) until a fresh
// screen's panel and desktop are up.
func (s *Screen) waitDrawn(ctx context.Context) error {
	s.m.mu.Lock()
	st := s.stack
	s.m.mu.Unlock()
	if st == nil {
		return nil
	}
	select {
	case <-st.drawn():
		return nil
	case <-ctx.Done():
		return s.ctxErr(ctx)
	}
}

// Driver is the running screen's input/capture driver (nil when stopped).
func (s *Screen) Driver() Driver {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if s.stack == nil {
		return nil
	}
	return s.stack.driver()
}

// WithLease runs fn on screen id under leaseID, after every earlier call on
// that screen (FIFO), with the screen running. fn's ctx is cancelled when a
// user preempts the lease or the screen stops; then WithLease returns 409
// user_has_control (or 503). Other packages (the browser's /open) use it to
// act under the same rules as /act. Unknown screens are 404; a stale or
// missing lease is 409 lease_required, or user_has_control when a user
// holds the screen.
func (m *Manager) WithLease(ctx context.Context, id, leaseID string, fn func(ctx context.Context, s *Screen) error) error {
	if err := ValidID(id); err != nil {
		return err
	}
	s := m.Get(id)
	if s == nil {
		return notFound(id)
	}
	// Fail fast before queueing; checked again once it is our turn.
	if _, err := m.leases.Check(id, leaseID); err != nil {
		return err
	}
	release, err := s.q.Acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	if _, err := m.leases.Check(id, leaseID); err != nil {
		return err
	}
	rs, err := m.Ensure(ctx, id)
	if err != nil {
		return err
	}
	if rs != s {
		return notFound(id) // forgotten while we waited
	}
	actx, done := s.begin(ctx, leaseID)
	defer done()
	// A preemption between the check above and begin bumped gen before
	// our session recorded it; check the lease once more under the session.
	if _, err := m.leases.Check(id, leaseID); err != nil {
		return err
	}
	err = fn(actx, s)
	m.touch(s)
	return s.translate(actx, err)
}

// Observation is one screenshot as the API returns it.
type Observation struct {
	// Image is the JPEG; empty when Unchanged.
	Image     []byte       `json:"image,omitempty"`
	Width     int          `json:"width"`
	Height    int          `json:"height"`
	Pointer   shared.Point `json:"pointer"`
	FrameHash string       `json:"frameHash"`
	Unchanged bool         `json:"unchanged"`
	Blocked   []any        `json:"blocked"`
	// Elements are the screen's elements, when asked for (ObserveOptions).
	Elements []shared.Element `json:"elements,omitzero"`
	// ElementsError says why Elements is empty when they could not be read.
	ElementsError *shared.ErrorBody `json:"elementsError,omitempty"`
}

// Observe captures the screen for ctx's session. A frame identical to the
// last one returned to the same lease comes back as unchanged, without
// image bytes. Nothing is returned when the lease changed meanwhile.
func (s *Screen) Observe(ctx context.Context) (*Observation, error) {
	return s.ObserveWith(ctx, ObserveOptions{})
}

// ObserveWith is Observe with options: with o.Elements the screen's
// elements are read beside the capture and returned with it (an
// unchanged frame still carries them).
func (s *Screen) ObserveWith(ctx context.Context, o ObserveOptions) (*Observation, error) {
	drv := s.Driver()
	if drv == nil {
		return nil, errUnavailable(s.ID, "is not running")
	}
	if err := s.waitDrawn(ctx); err != nil {
		return nil, err
	}
	sess := sessionFrom(ctx)
	s.inMu.Lock()
	prev := uint64(0)
	if sess != nil && s.lastLease == sess.leaseID {
		prev = s.lastHash
	}
	s.inMu.Unlock()
	elems := s.startElements(ctx, o)
	// The boxes that show a secret, read before and after the capture: a
	// field that moves meanwhile is painted over where it was and is.
	masker := s.m.secretMasker()
	before := s.startMasks(ctx, masker)
	f, changed, err := drv.CaptureIfChanged(ctx, prev)
	if err != nil {
		if elems != nil {
			<-elems
		}
		if before != nil {
			<-before
		}
		return nil, s.translate(ctx, err)
	}
	var masks []shared.Box
	if before != nil {
		masks = append(<-before, <-s.startMasks(ctx, masker)...)
	}
	obs := &Observation{}
	finishElements(obs, elems)
	if err := s.Held(ctx); err != nil {
		return nil, err
	}
	obs.Width, obs.Height, obs.Pointer = f.Width, f.Height, shared.Point{X: f.Pointer.X, Y: f.Pointer.Y}
	obs.FrameHash, obs.Blocked = hashString(f.Hash), []any{}
	if prev != 0 && (!changed || f.Hash == prev) {
		obs.Unchanged = true
	} else {
		obs.Image = f.JPEG
		if len(masks) > 0 {
			if obs.Image, err = maskFrame(f.JPEG, masks); err != nil {
				return nil, err
			}
		}
	}
	if sess != nil {
		s.inMu.Lock()
		s.lastHash, s.lastLease = f.Hash, sess.leaseID
		s.inMu.Unlock()
	}
	s.m.hooksMu.Lock()
	blocked := s.m.blocked
	s.m.hooksMu.Unlock()
	if blocked != nil {
		if b := blocked(s.ID); b != nil {
			obs.Blocked = b
		}
	}
	return obs, nil
}

func hashString(h uint64) string {
	const hexdigits = "0123456789abcdef"
	b := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		b[i] = hexdigits[h&0xf]
		h >>= 4
	}
	return string(b)
}

// ActionResult is one action's outcome in a batch.
type ActionResult struct {
	Index int               `json:"index"`
	Type  string            `json:"type"`
	OK    bool              `json:"ok"`
	Error *shared.ErrorBody `json:"error,omitempty"`
}

// ActResult is what /act returns.
type ActResult struct {
	Results     []ActionResult `json:"results"`
	Observation *Observation   `json:"observation"`
}

// Act runs a validated batch in order and returns one final observation.
// After each action the screen settles for Action.Settle() (none for
// screenshot, move and wait) before the next action or the capture. An
// action that fails ends the batch; its error is in its result and the
// observation is still returned. Preemption and a lost display end the
// whole call with an error and no frame.
func (s *Screen) Act(ctx context.Context, actions []shared.Action) (*ActResult, error) {
	return s.ActWith(ctx, actions, ObserveOptions{})
}

// ActWith is Act whose final observation follows o. An action that targets
// an element is resolved when its turn comes (the element's current
// centre); an element that is gone, stale, covered or off screen fails
// that action with its code, ends the batch, and the observation still
// comes back.
func (s *Screen) ActWith(ctx context.Context, actions []shared.Action, o ObserveOptions) (*ActResult, error) {
	results, err := s.RunActions(ctx, actions)
	if err != nil {
		return nil, err
	}
	obs, err := s.ObserveWith(ctx, o)
	if err != nil {
		return nil, err
	}
	return &ActResult{Results: results, Observation: obs}, nil
}

// RunActions is ActWith without the final observation (the act channel of
// an evaluation screen's commands: one request per pyautogui call).
func (s *Screen) RunActions(ctx context.Context, actions []shared.Action) ([]ActionResult, error) {
	drv := s.Driver()
	if drv == nil {
		return nil, errUnavailable(s.ID, "is not running")
	}
	res := &ActResult{Results: make([]ActionResult, 0, len(actions))}
	for i, a := range actions {
		if err := s.Held(ctx); err != nil {
			return nil, err
		}
		var err error
		switch a.Type {
		case shared.ActionScreenshot:
			// The batch's observation is the screenshot.
		case shared.ActionWait:
			err = s.Sleep(ctx, time.Duration(*a.Ms)*time.Millisecond)
		default:
			var ra shared.Action
			if ra, err = s.resolveElement(ctx, drv, a); err == nil {
				err = drv.Do(ctx, ra)
			}
		}
		if ae, ok := isElementErr(err); ok && ctx.Err() == nil {
			res.Results = append(res.Results, ActionResult{Index: i, Type: a.Type, Error: &shared.ErrorBody{Code: ae.Code, Message: ae.Message}})
			break
		}
		if err != nil {
			terr := s.translate(ctx, err)
			var ae *shared.APIError
			if errors.As(terr, &ae) || ctx.Err() != nil {
				return nil, terr
			}
			s.m.log.Warn().Str("screen", s.ID).Int("index", i).Str("action", a.Type).Err(err).Msg("action failed")
			res.Results = append(res.Results, ActionResult{Index: i, Type: a.Type, Error: &shared.ErrorBody{Code: shared.CodeInternal, Message: "the action failed; the batch stopped here"}})
			break
		}
		res.Results = append(res.Results, ActionResult{Index: i, Type: a.Type, OK: true})
		if err := s.Sleep(ctx, a.Settle()); err != nil {
			return nil, err
		}
	}
	return res.Results, nil
}

// Pointer is where the pointer is now (a capture, encoded only when the
// screen changed).
func (s *Screen) Pointer(ctx context.Context) (shared.Point, error) {
	drv := s.Driver()
	if drv == nil {
		return shared.Point{}, errUnavailable(s.ID, "is not running")
	}
	f, _, err := drv.CaptureIfChanged(ctx, 0)
	if err != nil {
		return shared.Point{}, s.translate(ctx, err)
	}
	return shared.Point{X: f.Pointer.X, Y: f.Pointer.Y}, nil
}
