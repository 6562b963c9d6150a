package screen

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

// maxActBody fits 50 actions of 10,000 escaped characters each.
const maxActBody = 8 << 20

// Routes registers the /screens routes on mux (Go 1.22 patterns).
func (m *Manager) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /screens", m.handleList)
	mux.HandleFunc("POST /screens/{id}/start", m.handleStart)
	mux.HandleFunc("POST /screens/{id}/stop", m.handleStop)
	mux.HandleFunc("DELETE /screens/{id}", m.handleForget)
	mux.HandleFunc("POST /screens/{id}/lease", m.handleLease)
	mux.HandleFunc("DELETE /screens/{id}/lease/{leaseId}", m.handleRelease)
	mux.HandleFunc("POST /screens/{id}/observe", m.handleObserve)
	mux.HandleFunc("POST /screens/{id}/act", m.handleAct)
	mux.HandleFunc("POST /screens/{id}/launch", m.handleLaunch)
	mux.HandleFunc("POST /screens/{id}/windows", m.handleWindows)
	mux.HandleFunc("POST /screens/{id}/clipboard/read", m.handleClipboardRead)
	mux.HandleFunc("POST /screens/{id}/clipboard/write", m.handleClipboardWrite)
	mux.HandleFunc("POST /screens/spare", m.handleSpare)
	m.recordRoutes(mux)
}

func (m *Manager) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *shared.APIError
	if !errors.As(err, &ae) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			err = shared.Errorf(http.StatusServiceUnavailable, shared.CodeTimeout, "the request ended before the screen answered")
		} else {
			m.log.Error().Str("method", r.Method).Str("path", r.URL.Path).Err(err).Msg("screen request failed")
		}
	}
	httpx.WriteErr(w, err)
}

// known validates the {id} path value and requires botd to know the screen.
func (m *Manager) known(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if err := ValidID(id); err != nil {
		return "", err
	}
	if m.Get(id) == nil {
		return "", notFound(id)
	}
	return id, nil
}

func (m *Manager) handleList(w http.ResponseWriter, r *http.Request) {
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"screens": m.List()})
}

func (m *Manager) handleStart(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := m.Ensure(r.Context(), id); err != nil {
		m.fail(w, r, err)
		return
	}
	in, _ := m.Info(id)
	httpx.WriteJSON(w, http.StatusOK, in)
}

func (m *Manager) handleStop(w http.ResponseWriter, r *http.Request) {
	id, err := m.known(r)
	if err == nil {
		err = m.Stop(r.Context(), id)
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	in, _ := m.Info(id)
	httpx.WriteJSON(w, http.StatusOK, in)
}

func (m *Manager) handleForget(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := m.Forget(r.Context(), id); err != nil {
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "forgotten": true})
}

type leaseRequest struct {
	Kind       lease.Kind `json:"kind"`
	Holder     string     `json:"holder"`
	TTLSeconds int        `json:"ttlSeconds"`
}

func (m *Manager) handleLease(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := ValidID(id); err != nil {
		m.fail(w, r, err)
		return
	}
	var req leaseRequest
	if err := httpx.DecodeJSON(w, r, &req, 0); err != nil {
		m.fail(w, r, err)
		return
	}
	if req.TTLSeconds < 0 {
		m.fail(w, r, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "ttlSeconds must not be negative"))
		return
	}
	if _, err := m.Register(id); err != nil {
		m.fail(w, r, err)
		return
	}
	l, err := m.leases.Acquire(id, req.Kind, req.Holder, time.Duration(req.TTLSeconds)*time.Second)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	if l.Kind == lease.User {
		// Taking over wakes the screen so the human sees it; botd owns the
		// start, not this request.
		m.bg.Add(1)
		go func() {
			defer m.bg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
			defer cancel()
			if _, err := m.Ensure(ctx, id); err != nil {
				m.log.Warn().Str("screen", id).Err(err).Msg("start on takeover")
			}
		}()
	}
	httpx.WriteJSON(w, http.StatusOK, l)
}

func (m *Manager) handleRelease(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := ValidID(id); err != nil {
		m.fail(w, r, err)
		return
	}
	if err := m.leases.Release(id, r.PathValue("leaseId")); err != nil {
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"released": true})
}

type observeRequest struct {
	LeaseID string `json:"leaseId"`
	// Elements adds the screen's elements to the observation.
	Elements bool `json:"elements,omitempty"`
}

func (m *Manager) handleObserve(w http.ResponseWriter, r *http.Request) {
	id, err := m.known(r)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	var req observeRequest
	if err := httpx.DecodeJSON(w, r, &req, 0); err != nil {
		m.fail(w, r, err)
		return
	}
	var obs *Observation
	err = m.WithLease(r.Context(), id, req.LeaseID, func(ctx context.Context, s *Screen) error {
		var err error
		obs, err = s.ObserveWith(ctx, ObserveOptions{Elements: req.Elements})
		return err
	})
	if err != nil {
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, obs)
}

type actRequest struct {
	LeaseID string          `json:"leaseId"`
	Actions []shared.Action `json:"actions"`
	// Elements adds the screen's elements to the final observation.
	Elements bool `json:"elements,omitempty"`
}

func (m *Manager) handleAct(w http.ResponseWriter, r *http.Request) {
	id, err := m.known(r)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	var req actRequest
	if err := httpx.DecodeJSON(w, r, &req, maxActBody); err != nil {
		m.fail(w, r, err)
		return
	}
	if err := shared.ValidateActionsElements(req.Actions, Width, Height); err != nil {
		m.fail(w, r, shared.Errorf(http.StatusBadRequest, shared.CodeInvalidAction, "%s", err.Error()))
		return
	}
	var res *ActResult
	err = m.WithLease(r.Context(), id, req.LeaseID, func(ctx context.Context, s *Screen) error {
		var err error
		res, err = s.ActWith(ctx, req.Actions, ObserveOptions{Elements: req.Elements})
		return err
	})
	if err != nil {
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, res)
}

type launchRequest struct {
	LeaseID string `json:"leaseId"`
	App     string `json:"app"`
}

func (m *Manager) handleLaunch(w http.ResponseWriter, r *http.Request) {
	id, err := m.known(r)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	var req launchRequest
	if err := httpx.DecodeJSON(w, r, &req, 0); err != nil {
		m.fail(w, r, err)
		return
	}
	l, err := m.launcher(req.App)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	var pid int
	err = m.WithLease(r.Context(), id, req.LeaseID, func(ctx context.Context, s *Screen) error {
		var err error
		pid, err = l(ctx, s)
		return err
	})
	if err != nil {
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"app": req.App, "pid": pid})
}

// leaseOnly is a body that only names the caller's lease.
type leaseOnly struct {
	LeaseID string `json:"leaseId"`
}

// screenBody resolves the route's screen and decodes the body into v (at
// most max bytes; 0 for the default), answering the error itself when
// either fails.
func (m *Manager) screenBody(w http.ResponseWriter, r *http.Request, v any, max int64) (string, bool) {
	id, err := m.known(r)
	if err == nil {
		err = httpx.DecodeJSON(w, r, v, max)
	}
	if err != nil {
		m.fail(w, r, err)
		return "", false
	}
	return id, true
}

func (m *Manager) handleWindows(w http.ResponseWriter, r *http.Request) {
	var req leaseOnly
	id, ok := m.screenBody(w, r, &req, 0)
	if !ok {
		return
	}
	ws, err := m.Windows(r.Context(), id, req.LeaseID)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, shared.Windows{Windows: ws})
}

func (m *Manager) handleClipboardRead(w http.ResponseWriter, r *http.Request) {
	var req leaseOnly
	id, ok := m.screenBody(w, r, &req, 0)
	if !ok {
		return
	}
	text, err := m.Clipboard(r.Context(), id, req.LeaseID)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, shared.Clipboard{Text: text})
}

type clipboardWriteRequest struct {
	LeaseID string  `json:"leaseId"`
	Text    *string `json:"text"`
}

// maxClipboardBody fits 1 MiB of text however JSON escapes it.
const maxClipboardBody = 7 * shared.MaxClipboardBytes

func (m *Manager) handleClipboardWrite(w http.ResponseWriter, r *http.Request) {
	var req clipboardWriteRequest
	id, ok := m.screenBody(w, r, &req, maxClipboardBody)
	if !ok {
		return
	}
	if req.Text == nil {
		m.fail(w, r, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "text is required"))
		return
	}
	if err := m.SetClipboard(r.Context(), id, req.LeaseID, *req.Text); err != nil {
		m.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]int{"bytes": len(*req.Text)})
}
