package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/capability"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/providers"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/pkg/shared"
)

func (a *api) createComputer(w http.ResponseWriter, r *http.Request) {
	var req computers.CreateRequest
	if !decode(w, r, &req) {
		return
	}
	// attach makes the worker talk to a botd of the caller's choosing with
	// a token: an operator action, refused before anything is read or dialed.
	if (req.Attach != nil || a.o.Computers.ProviderKind(req.Provider) == providers.KindAttach) && !IsOperator(r) {
		writeErr(w, http.StatusForbidden, shared.CodeForbidden, OperatorOnly)
		return
	}
	// The scope's kept home is restored only with its restore key, which
	// travels in a header like every credential (never in the body or URL).
	req.RestoreKey = r.Header.Get(capability.RestoreHeader)
	out, err := a.o.Computers.Create(r.Context(), req)
	var taken *computers.ScopeTaken
	if errors.As(err, &taken) {
		// The scope's live computer: its id, never its capability.
		writeJSON(w, taken.Status, map[string]any{"error": map[string]any{
			"code": taken.Code, "message": taken.Message, "computerId": taken.ComputerID}})
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"computer": out.View, "capability": out.Capability, "restored": out.Restored})
}

// listComputers is every live computer, or with ?scope=session:<id>,
// team:<id> or account the one live computer of that scope (a list of
// at most one).
func (a *api) listComputers(w http.ResponseWriter, r *http.Request) {
	var list []computers.View
	var err error
	if q := r.URL.Query(); q.Has("scope") {
		var kind, id string
		if kind, id, err = computers.ParseScope(q.Get("scope")); err == nil {
			list, err = a.o.Computers.InScope(r.Context(), kind, id)
		}
	} else {
		list, err = a.o.Computers.List(r.Context())
	}
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"computers": list})
}

// BotView is a bot as the API shows it.
type BotView struct {
	ID     string `json:"id"`
	Team   string `json:"team"`
	Screen string `json:"screen"`
	Dir    string `json:"dir"`
}

func botView(c store.Computer, b store.Bot) BotView {
	dir := "."
	if c.Kind == computers.KindTeam {
		dir = "bots/" + b.ID
	}
	return BotView{ID: b.ID, Team: b.TeamID, Screen: b.ID, Dir: dir}
}

func (a *api) getComputer(w http.ResponseWriter, r *http.Request) {
	c, err := a.o.Computers.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	bots, err := a.o.Computers.Bots(r.Context(), c.ID)
	if err != nil {
		fail(w, err)
		return
	}
	views := []BotView{}
	for _, b := range bots {
		views = append(views, botView(c, b))
	}
	var last any
	if cp, err := a.o.Computers.LatestCheckpoint(r.Context(), c.ID); err == nil {
		last = map[string]any{"revision": cp.Revision, "size": cp.Size, "at": cp.At}
	}
	var desc *providers.Description
	if d, ok := a.o.Computers.Describe(c); ok {
		desc = &d
	}
	writeJSON(w, http.StatusOK, map[string]any{"computer": struct {
		computers.View
		// Description is the provider's: kind and capabilities
		// (multiScreen, stop, persistent); null when this worker lacks it.
		Description *providers.Description `json:"description"`
		// Runtimes are where a run's agent loop can run on this computer,
		// the default first: "machine" (Codex in the machine, botd
		// machines only) and "worker" (the worker's own loop).
		Runtimes       []string     `json:"runtimes"`
		Bots           []BotView    `json:"bots"`
		Screens        []ScreenView `json:"screens"`
		LastCheckpoint any          `json:"lastCheckpoint"`
	}{computers.ViewOf(c), desc, a.o.Computers.Runtimes(c), views, a.screens(r.Context(), c), last}})
}

// ScreenView is one of the machine's screens as botd reports it (never a
// lease id).
type ScreenView struct {
	ID    string       `json:"id"`
	State string       `json:"state"`
	Lease *ScreenLease `json:"lease,omitempty"`
}

// ScreenLease is who holds a screen (never the lease id).
type ScreenLease struct {
	Kind   string `json:"kind"`
	Holder string `json:"holder"`
}

// screens asks a running machine for its screens, briefly; nothing when it
// does not answer (the computer's state says why).
func (a *api) screens(ctx context.Context, c store.Computer) []ScreenView {
	out := []ScreenView{}
	if c.ObservedState != store.StateRunning {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := a.o.Computers.Machine(ctx, c.ID)
	if err != nil {
		return out
	}
	list, err := m.Screens(ctx)
	if err != nil {
		return out
	}
	for _, sc := range list {
		v := ScreenView{ID: sc.ID, State: sc.State}
		if sc.Lease != nil {
			v.Lease = &ScreenLease{Kind: sc.Lease.Kind, Holder: sc.Lease.Holder}
		}
		out = append(out, v)
	}
	return out
}

func (a *api) adopt(w http.ResponseWriter, r *http.Request) {
	capa, err := a.o.Computers.Adopt(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"capability": capa})
}

func (a *api) lifecycle(fn func(context.Context, string) (computers.View, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := fn(r.Context(), r.PathValue("id"))
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"computer": v})
	}
}

// destroyComputer is DELETE /v1/computers/{id}: the machine, and the
// computer's checkpoints in the home store unless ?keepHome=true, which
// answers the kept home's restore key (shown this once, to the capability
// holder; a create for the scope restores the home only with it).
func (a *api) destroyComputer(w http.ResponseWriter, r *http.Request) {
	var o computers.DestroyOptions
	switch r.URL.Query().Get("keepHome") {
	case "", "false":
	case "true":
		o.KeepHome = true
	default:
		writeErr(w, http.StatusBadRequest, shared.CodeBadRequest, "keepHome is true or false")
		return
	}
	if o.KeepHome {
		v, key, err := a.o.Computers.DestroyKeepingHome(r.Context(), r.PathValue("id"))
		if err != nil {
			fail(w, err)
			return
		}
		answer := map[string]any{"computer": v}
		if key != "" {
			answer["restoreKey"] = key
		}
		writeJSON(w, http.StatusOK, answer)
		return
	}
	v, err := a.o.Computers.DestroyWith(r.Context(), r.PathValue("id"), o)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"computer": v})
}

// mintRestoreKey is the operator's POST /v1/scopes/{scope}/restore-key: a
// new restore key for the scope's newest kept home (after a restart forgot
// the one its destroy answered), as adopt mints a capability.
func (a *api) mintRestoreKey(w http.ResponseWriter, r *http.Request) {
	kind, id, err := computers.ParseScope(r.PathValue("scope"))
	if err != nil {
		fail(w, err)
		return
	}
	key, from, err := a.o.Computers.MintRestoreKey(r.Context(), kind, id)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"restoreKey": key, "computerId": from})
}

func (a *api) addBot(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID string `json:"id"`
	}
	if !decode(w, r, &req) {
		return
	}
	b, err := a.o.Computers.AddBot(r.Context(), r.PathValue("id"), req.ID)
	if err != nil {
		fail(w, err)
		return
	}
	c, err := a.o.Computers.Get(r.Context(), b.ComputerID)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"bot": botView(c, b)})
}

// removeBot is DELETE /v1/computers/{id}/bots/{bot}[?purge=true]: the
// bot's screens stopped and their profiles forgotten, the bot removed;
// bots/<id>/ stays unless purge. 409 while the bot has a run.
func (a *api) removeBot(w http.ResponseWriter, r *http.Request) {
	purge := false
	switch r.URL.Query().Get("purge") {
	case "", "false":
	case "true":
		purge = true
	default:
		writeErr(w, http.StatusBadRequest, shared.CodeBadRequest, "purge: want true or false")
		return
	}
	screens, err := a.o.Computers.RemoveBot(r.Context(), r.PathValue("id"), r.PathValue("bot"), purge)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": r.PathValue("bot"), "forgottenScreens": screens, "purged": purge})
}
