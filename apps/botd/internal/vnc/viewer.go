package vnc

import (
	"context"
	"embed"
	"html/template"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/apps/botd/internal/screen"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/lease"
)

//go:embed assets
var assets embed.FS

var pageTmpl = template.Must(template.ParseFS(assets, "assets/view.html"))

// mintRequest is POST /screens/{id}/viewer-token's body.
type mintRequest struct {
	Mode       Mode   `json:"mode"`
	TTLSeconds int    `json:"ttlSeconds"`
	Holder     string `json:"holder"`
}

// MintResponse is a fresh viewer link. Token is a capability: hand it only
// to the person it is for.
type MintResponse struct {
	Token     string    `json:"token"`
	Screen    string    `json:"screen"`
	Mode      Mode      `json:"mode"`
	Holder    string    `json:"holder,omitempty"`
	ExpiresAt time.Time `json:"expiresAt"`
	// ViewPath opens the viewer page; VNCPath is the RFB websocket.
	ViewPath string `json:"viewPath"`
	VNCPath  string `json:"vncPath"`
}

func (s *Server) handleMint(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := screen.ValidID(id); err != nil {
		httpx.WriteErr(w, err)
		return
	}
	var req mintRequest
	if err := httpx.DecodeJSON(w, r, &req, 0); err != nil {
		httpx.WriteErr(w, err)
		return
	}
	if !req.Mode.Valid() {
		httpx.WriteError(w, http.StatusBadRequest, shared.CodeBadRequest, "mode must be view or control")
		return
	}
	ttl := time.Duration(req.TTLSeconds) * time.Second
	switch {
	case req.TTLSeconds == 0:
		ttl = DefaultLinkTTL
	case req.TTLSeconds < 0 || ttl > MaxLinkTTL:
		httpx.WriteError(w, http.StatusBadRequest, shared.CodeBadRequest, "ttlSeconds must be 1..600")
		return
	}
	holder := ""
	if req.Mode == ModeControl {
		holder = req.Holder
		if holder == "" {
			holder = DefaultHolder
		}
		if len(holder) > lease.MaxHolderLen {
			httpx.WriteError(w, http.StatusBadRequest, shared.CodeBadRequest, "holder is too long")
			return
		}
	} else if req.Holder != "" {
		httpx.WriteError(w, http.StatusBadRequest, shared.CodeBadRequest, "holder is for control links only")
		return
	}
	tok, c := s.signer.Mint(id, req.Mode, holder, ttl)
	// The bearer again, after signing: a request that passed the bearer
	// check with a token rotated away meanwhile (its body sent late) could
	// otherwise be handed a link under the new key. A rotation swaps the
	// bearer before it re-keys, so a link signed with the new key is only
	// answered to the new bearer.
	if s.o.Authorized == nil || !s.o.Authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="botd"`)
		httpx.WriteError(w, http.StatusUnauthorized, shared.CodeUnauthorized, "missing or invalid bearer token")
		return
	}
	q := url.Values{"token": {tok}}.Encode()
	httpx.WriteJSON(w, http.StatusOK, MintResponse{
		Token: tok, Screen: id, Mode: req.Mode, Holder: holder, ExpiresAt: c.Expires.UTC(),
		ViewPath: "/screens/" + id + "/view?" + q,
		VNCPath:  "/screens/" + id + "/vnc?mode=" + string(req.Mode) + "&" + q,
	})
}

// link verifies the request's viewer link for screen {id} in any mode
// (control too when control is set).
func (s *Server) link(r *http.Request, control bool) (string, Claims, error) {
	id := r.PathValue("id")
	c, err := s.signer.Parse(linkFrom(r))
	if err != nil || c.Screen != id || (control && c.Mode != ModeControl) {
		return id, Claims{}, errUnauthorized
	}
	return id, c, nil
}

// securePage are the headers of the viewer page and its assets: nothing
// cached, no referrer (the URL carries the link), scripts only from botd.
func securePage(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self' ws: wss:")
}

func (s *Server) handleView(w http.ResponseWriter, r *http.Request) {
	id, c, err := s.link(r, false)
	if err != nil {
		httpx.WriteErr(w, err)
		return
	}
	securePage(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = pageTmpl.Execute(w, map[string]any{"Screen": id, "Mode": string(c.Mode), "Holder": c.Holder, "Preload": s.preload()})
}

// ViewerState is what the viewer page's bar shows.
type ViewerState struct {
	Screen string              `json:"screen"`
	Mode   Mode                `json:"mode"`
	State  shared.ProcessState `json:"state"`
	// Running is false when the screen is stopped: nobody sees it until
	// something starts it (watching never does).
	Running bool              `json:"running"`
	Lease   *shared.LeaseInfo `json:"lease"`
	// InControl: a control link whose holder has the user lease.
	InControl bool      `json:"inControl"`
	ExpiresAt time.Time `json:"linkExpiresAt"`
}

func (s *Server) state(id string, c Claims) ViewerState {
	st := ViewerState{Screen: id, Mode: c.Mode, State: shared.StateStopped, ExpiresAt: c.Expires.UTC()}
	if in, ok := s.screens.Info(id); ok {
		st.State, st.Running, st.Lease = in.State, in.State == shared.StateRunning, in.Lease
	}
	cur := s.screens.Leases().Current(id)
	st.InControl = c.Mode == ModeControl && cur != nil && cur.Kind == lease.User && cur.Holder == c.Holder
	return st
}

func (s *Server) handleState(w http.ResponseWriter, r *http.Request) {
	id, c, err := s.link(r, false)
	if err != nil {
		httpx.WriteErr(w, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, s.state(id, c))
}

// handleTake acquires the user lease for a control link's holder (a user
// preempts an agent: its in-flight action fails with user_has_control).
// Taking it again renews it; the page does that while it has control.
func (s *Server) handleTake(w http.ResponseWriter, r *http.Request) {
	id, c, err := s.link(r, true)
	if err != nil {
		httpx.WriteErr(w, err)
		return
	}
	if _, err := s.screens.Register(id); err != nil {
		httpx.WriteErr(w, err)
		return
	}
	// The lease never outlives the link that took it.
	l, err := s.screens.Leases().AcquireUntil(id, lease.User, c.Holder, 0, c.Expires)
	if err != nil {
		httpx.WriteErr(w, err)
		return
	}
	// Like POST /screens/{id}/lease: taking over wakes the screen so the
	// human sees it; botd owns the start, not this request.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), screen.StartTimeout)
		defer cancel()
		if _, err := s.screens.Ensure(ctx, id); err != nil {
			s.log.Warn().Str("screen", id).Err(err).Msg("start on takeover")
		}
	}()
	s.log.Info().Str("screen", id).Str("holder", c.Holder).Msg("viewer took control")
	httpx.WriteJSON(w, http.StatusOK, l.Info())
}

// handleGive releases the user lease when the link's holder has it.
func (s *Server) handleGive(w http.ResponseWriter, r *http.Request) {
	id, c, err := s.link(r, true)
	if err != nil {
		httpx.WriteErr(w, err)
		return
	}
	leases := s.screens.Leases()
	cur := leases.Current(id)
	if cur == nil || cur.Kind != lease.User || cur.Holder != c.Holder {
		httpx.WriteError(w, http.StatusNotFound, shared.CodeNotFound, "this link does not have control of the screen")
		return
	}
	if err := leases.Release(id, cur.ID); err != nil {
		httpx.WriteErr(w, err)
		return
	}
	s.log.Info().Str("screen", id).Str("holder", c.Holder).Msg("viewer released control")
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"released": true})
}

// preload lists noVNC's modules for <link rel="modulepreload">: the page
// then fetches them in parallel instead of one import level at a time.
func (s *Server) preload() []string {
	s.preloadOnce.Do(func() {
		for _, dir := range []string{"core", "vendor/pako/lib/zlib", "vendor/pako/lib/utils"} {
			_ = fs.WalkDir(os.DirFS(s.o.NoVNCDir), dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() && path.Ext(p) == ".js" {
					s.preloadList = append(s.preloadList, "/viewer/novnc/"+p)
				}
				return nil
			})
		}
	})
	return s.preloadList
}

// handleStatic serves the page's own script and style (embedded) and
// noVNC's ES modules from NoVNCDir (core/ and vendor/ only, .js only,
// through os.Root so nothing outside it is reachable).
func (s *Server) handleStatic(w http.ResponseWriter, r *http.Request) {
	file := r.PathValue("file")
	securePage(w)
	switch file {
	case "app.js", "app.css":
		b, err := assets.ReadFile("assets/" + file)
		if err != nil {
			httpx.WriteError(w, http.StatusNotFound, shared.CodeNotFound, "no such file")
			return
		}
		w.Header().Set("Content-Type", mime.TypeByExtension(path.Ext(file)))
		_, _ = w.Write(b)
		return
	}
	rel, ok := strings.CutPrefix(file, "novnc/")
	clean := path.Clean(rel)
	if !ok || clean != rel || !(strings.HasPrefix(rel, "core/") || strings.HasPrefix(rel, "vendor/")) || path.Ext(rel) != ".js" {
		httpx.WriteError(w, http.StatusNotFound, shared.CodeNotFound, "no such file")
		return
	}
	root, err := os.OpenRoot(s.o.NoVNCDir)
	if err != nil {
		httpx.WriteError(w, http.StatusNotFound, shared.CodeNotFound, "noVNC is not installed")
		return
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		httpx.WriteError(w, http.StatusNotFound, shared.CodeNotFound, "no such file")
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, _ = io.Copy(w, f)
}
