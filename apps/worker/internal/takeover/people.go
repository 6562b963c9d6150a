package takeover

// What the worker serves to people (issue 15, requirements 3–5): the
// takeover policy's control relay, the dashboard over the worker's
// computers, runs and takeover, and the follower of the machines' events.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/dashboard"
	"github.com/open-bot/computer/apps/worker/internal/events"
	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/store"
)

// People is what the worker serves to people rather than to API callers:
// the control relay (/control/…, the link is the credential) and the
// dashboard (/dashboard/…, a session cookie from a one-time login link).
// Everything else goes to the API, behind the worker token.
type People struct {
	Takeover  *Service
	Dashboard *dashboard.Dashboard
	Events    *events.Follower
}

// NewPeople builds the event follower and the dashboard around tk (the
// takeover service, already handed to the run manager through its hook).
func NewPeople(st store.Store, comps *computers.Service, m *runs.Manager, tk *Service, log zerolog.Logger) (*People, error) {
	d, err := dashboard.New(dashboard.Options{
		Lister:     &dashLister{st: st, comps: comps, tk: tk},
		Controller: &dashController{tk: tk},
		Screens:    dashScreens{comps: comps},
		Log:        log.With().Str("sub", "dashboard").Logger(),
	})
	if err != nil {
		return nil, err
	}
	return &People{Takeover: tk, Dashboard: d, Events: events.New(comps, m, log.With().Str("sub", "events").Logger())}, nil
}

// Handler routes /control/ and /dashboard/ to the people's handlers and
// everything else to api.
func (p *People) Handler(api http.Handler) http.Handler {
	control := p.Takeover.Handler("")
	dash := p.Dashboard.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, Prefix):
			control.ServeHTTP(w, r)
		case r.URL.Path == "/dashboard":
			http.Redirect(w, r, "/dashboard/", http.StatusSeeOther)
		case strings.HasPrefix(r.URL.Path, "/dashboard/"):
			dash.ServeHTTP(w, r)
		default:
			api.ServeHTTP(w, r)
		}
	})
}

// LoginLink is a one-time dashboard sign-in link on base (a secret for the
// person at the terminal: print it, never log it).
func (p *People) LoginLink(base string) (string, error) {
	path, err := p.Dashboard.LoginLink()
	if err != nil {
		return "", err
	}
	return strings.TrimRight(base, "/") + path, nil
}

type dashLister struct {
	st    store.Store
	comps *computers.Service
	tk    *Service
}

func (l *dashLister) Computers(ctx context.Context) ([]dashboard.Computer, error) {
	vs, err := l.comps.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]dashboard.Computer, 0, len(vs))
	for _, v := range vs {
		c := dashboard.Computer{ID: v.ID, Kind: v.Kind, Provider: v.Provider, State: v.State}
		if sc, err := l.comps.Get(ctx, v.ID); err == nil {
			if d, ok := l.comps.Describe(sc); ok {
				c.Capabilities = &dashboard.Capabilities{MultiScreen: d.Capabilities.MultiScreen, Stop: d.Capabilities.Stop, Persistent: d.Capabilities.Persistent}
			}
		}
		if cp, err := l.comps.LatestCheckpoint(ctx, v.ID); err == nil {
			c.LastCheckpoint = &dashboard.Checkpoint{Revision: cp.Revision, Size: cp.Size, At: cp.At}
		}
		out = append(out, c)
	}
	return out, nil
}

func (l *dashLister) Bots(ctx context.Context, computerID string) ([]dashboard.Bot, error) {
	if _, err := l.comps.Get(ctx, computerID); err != nil {
		return nil, err
	}
	bots, err := l.comps.Bots(ctx, computerID)
	if err != nil {
		return nil, err
	}
	states, unread := l.screenStates(ctx, computerID)
	out := make([]dashboard.Bot, 0, len(bots))
	for _, b := range bots {
		st := states[b.ID]
		switch {
		case unread:
			st = ScreenUnavailable
		case st == "":
			st = "stopped"
		}
		out = append(out, dashboard.Bot{ID: b.ID, Screen: b.ID, ScreenState: st, InControl: l.tk.InControl(computerID, b.ID)})
	}
	return out, nil
}

// ScreenUnavailable is a bot's screen state on the dashboard when the
// computer's machine did not say (no answer within dashScreensTimeout, an
// answer over its cap, an error).
const ScreenUnavailable = "unavailable"

// dashScreensTimeout bounds the machine's screens call of one computer's
// part of the dashboard (within dashboard.Options.StateTimeout, so the
// bots still show).
const dashScreensTimeout = 3 * time.Second

// screenStates is the machine's screen states by id; unread is true when
// the running machine did not answer them.
func (l *dashLister) screenStates(ctx context.Context, computerID string) (states map[string]string, unread bool) {
	ctx, cancel := context.WithTimeout(ctx, dashScreensTimeout)
	defer cancel()
	m, err := l.comps.Machine(ctx, computerID)
	if err != nil {
		return nil, false // not running (or not reached): its screens are stopped
	}
	scs, err := m.Screens(ctx)
	if err != nil {
		return nil, true
	}
	states = make(map[string]string, len(scs))
	for _, s := range scs {
		states[s.ID] = s.State
	}
	return states, false
}

// dashRuns and dashEvents bound what the page shows per computer.
const dashRuns, dashEvents = 10, 30

func (l *dashLister) Runs(ctx context.Context, computerID string) ([]dashboard.Run, error) {
	rs, err := l.st.ListRuns(ctx, computerID)
	if err != nil {
		return nil, err
	}
	if len(rs) > dashRuns {
		rs = rs[:dashRuns]
	}
	out := make([]dashboard.Run, 0, len(rs))
	for _, r := range rs {
		// Only what the page shows is read: a run's events may be many
		// (up to runs.MaxRunEvents), and this call serves every team.
		evs, err := l.st.RecentEvents(ctx, r.ID, dashEvents, "notification")
		if err != nil {
			return nil, err
		}
		dr := dashboard.Run{ID: r.ID, BotID: r.BotID, State: r.State, Events: make([]dashboard.Event, 0, len(evs))}
		for _, e := range evs {
			dr.Events = append(dr.Events, dashboard.Event{At: e.At, Kind: e.Type, Text: eventText(e.Type, e.Data)})
		}
		out = append(out, dr)
	}
	return out, nil
}

// eventText is a short line for a run event (never a control link: the
// page shows runs to whoever signed in, the link is for the taker).
func eventText(typ string, data []byte) string {
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	delete(m, "controlUrl")
	switch typ {
	case "tool_call":
		return fmt.Sprintf("%v", m["tool"])
	case "tool_result":
		return fmt.Sprintf("%v ok=%v", m["tool"], m["success"])
	case "status":
		s := fmt.Sprintf("%v", m["status"])
		if e, ok := m["error"].(string); ok && e != "" {
			s += ": " + e
		}
		if r, ok := m["reason"].(string); ok && r != "" {
			s += ": " + r
		}
		return s
	case events.RunEventBotd:
		s := fmt.Sprintf("%v", m["kind"])
		if u, ok := m["url"].(string); ok {
			s += " " + u
		}
		return s
	case "notification":
		return fmt.Sprintf("%v", m["method"])
	}
	b, _ := json.Marshal(m)
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}

type dashController struct{ tk *Service }

func (c *dashController) TakeControl(ctx context.Context, computerID, botID string) (dashboard.ControlLink, error) {
	l, err := c.tk.Take(ctx, computerID, botID, "")
	return dashboard.ControlLink{URL: l.URL, ExpiresAt: l.ExpiresAt}, err
}

func (c *dashController) ReleaseControl(ctx context.Context, computerID, botID string) error {
	return c.tk.Release(ctx, computerID, botID)
}

type dashScreens struct{ comps *computers.Service }

func (s dashScreens) Machine(ctx context.Context, computerID string) (machines.Machine, error) {
	return s.comps.Machine(ctx, computerID)
}

// CheckScreen is the machine's screen limit (dashboard.ScreenChecker): a
// single-screen backend shows only its primary screen.
func (s dashScreens) CheckScreen(ctx context.Context, computerID, screen string) error {
	m, err := s.comps.Machine(ctx, computerID)
	if err != nil {
		return err
	}
	return m.CheckScreen(ctx, screen)
}
