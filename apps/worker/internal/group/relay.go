package group

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/capability"
	"github.com/open-bot/computer/apps/worker/internal/dashboard"
	"github.com/open-bot/computer/apps/worker/internal/httpapi"
	"github.com/open-bot/computer/apps/worker/internal/mcp"
	"github.com/open-bot/computer/apps/worker/internal/takeover"
	"github.com/open-bot/computer/apps/worker/internal/tracing"
	"github.com/open-bot/computer/pkg/shared"
)

// capsPath is the peers' capability channel on the group listener, and
// poolPath where each tells its ready pooled machines by kind.
const (
	capsPath = "/group/v1/caps"
	poolPath = "/group/v1/pool"
)

// poolPeer is the group address of a peer whose warm pool holds a ready
// machine for create request r when this worker's holds none of its kind
// (the body is read and put back); "" serves r here. A create presenting a
// restore key stays here (a kept home is never served from a pool).
func (g *Group) poolPeer(r *http.Request) string {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/computers" || g.o.PoolReady == nil || g.o.PoolKind == nil ||
		r.Header.Get("X-Restore-Key") != "" {
		return ""
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil || len(body) > 1<<20 {
		return ""
	}
	var req struct {
		Provider string `json:"provider"`
	}
	if json.Unmarshal(body, &req) != nil {
		return ""
	}
	kind := g.o.PoolKind(req.Provider)
	if kind == "" || g.o.PoolReady()[kind] > 0 {
		return ""
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	addrs, err := g.peers(ctx)
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, a+poolPath, nil)
		if err != nil {
			continue
		}
		hreq.Header.Set(TokenHeader, g.o.Token)
		resp, err := g.client.Do(hreq)
		if err != nil {
			continue
		}
		var ready map[string]int
		derr := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&ready)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && derr == nil && ready[kind] > 0 {
			return a
		}
	}
	return ""
}

// computerOf names the computer a request acts for: the {id} of
// /v1/computers/{id}/… and /dashboard/api/computers/{id}/…, the computer a
// person's control link or a dashboard screen view names, or the computer
// whose capability an MCP request carries; "" for requests of no one
// computer (list, create, the dashboard's page and state), which any
// worker serves.
func (g *Group) computerOf(r *http.Request) string {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/v1/computers/"); ok {
		id, _, _ := strings.Cut(rest, "/")
		return id
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, "/dashboard/api/computers/"); ok {
		id, _, _ := strings.Cut(rest, "/")
		return id // a signed-in person's screens and take/release
	}
	if view, ok := strings.CutPrefix(r.URL.Path, "/dashboard/vnc/"); ok {
		return dashboard.ViewComputer(view) // a screen view, held by the owner that made it
	}
	if link, ok := strings.CutPrefix(r.URL.Path, takeover.Prefix); ok && !strings.Contains(link, "/") && link != "control.js" {
		return takeover.LinkComputer(link) // a person's control link
	}
	if r.URL.Path == mcp.Path {
		if id, ok := g.o.Caps.Lookup(r.Header.Get(capability.Header)); ok {
			return id
		}
	}
	return ""
}

// writeErr answers in the API's error envelope.
func writeErr(w http.ResponseWriter, status int, code shared.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(shared.ErrorEnvelope{Error: shared.ErrorBody{Code: code, Message: msg}})
}

func moving(w http.ResponseWriter, err error) {
	var ae *shared.APIError
	if errors.As(err, &ae) {
		writeErr(w, ae.Status, ae.Code, ae.Message)
		return
	}
	writeErr(w, http.StatusServiceUnavailable, shared.CodeUnavailable, "the worker group could not find the computer's owner; retry")
}

// Relay serves requests for computers this worker owns (or claims now)
// with next, and relays the rest to their owner.
func (g *Group) Relay(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := g.computerOf(r)
		if id == "" {
			if addr := g.poolPeer(r); addr != "" {
				g.relay(addr, "", w, r)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		addr, err := g.Owner(r.Context(), id)
		switch {
		case err != nil:
			moving(w, err)
		case addr == "":
			next.ServeHTTP(w, r)
		default:
			g.relay(addr, id, w, r)
		}
	})
}

// relay sends r to the peer at addr over the group listener: the group
// token added, the caller's own headers as they came (the owner checks
// them again), and the operator's standing when this worker's operator
// socket admitted r.
func (g *Group) relay(addr, id string, w http.ResponseWriter, r *http.Request) {
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		writeErr(w, http.StatusServiceUnavailable, shared.CodeUnavailable, "the computer's owner has no usable group address; retry")
		return
	}
	start := time.Now()
	ok := true
	op := httpapi.IsOperator(r)
	r = r.Clone(r.Context())
	end := g.o.Tracing.Relay(r.Context(), r.Method, id, r.Header)
	sw := &statusOf{ResponseWriter: w}
	w = sw
	defer func() { end(sw.status) }()
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = r.Host
			pr.Out.Header.Del(OperatorHeader)
			pr.Out.Header.Set(TokenHeader, g.o.Token)
			if op {
				pr.Out.Header.Set(OperatorHeader, "1")
			}
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			ok = false
			g.o.Log.Warn().Err(err).Msg("worker group: relay to the owner failed")
			writeErr(w, http.StatusBadGateway, shared.CodeUnavailable, "the computer's owner in the worker group did not answer; retry")
		},
	}
	p.ServeHTTP(w, r)
	g.o.Metrics.Relay(ok, time.Since(start))
}

// PeerHandler is the group listener's handler: only requests with the
// group token pass. The capability channel is its own; every other
// request is one a peer relayed, served with api (the worker's handler
// without Relay: a relayed request is never relayed again) when this
// worker owns its computer, else refused with 503 so that the caller
// retries.
func (g *Group) PeerHandler(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.checkToken(r) {
			writeErr(w, http.StatusUnauthorized, shared.CodeUnauthorized, "missing or invalid worker group token")
			return
		}
		r.Header.Del(TokenHeader)
		r = r.WithContext(tracing.FromPeer(r.Context(), r.Header))
		switch r.URL.Path {
		case capsPath:
			g.serveCaps(w, r)
			return
		case poolPath:
			ready := map[string]int{}
			if g.o.PoolReady != nil {
				ready = g.o.PoolReady()
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(ready)
			return
		}
		op := r.Header.Get(OperatorHeader) == "1"
		r.Header.Del(OperatorHeader)
		if id := g.computerOf(r); id != "" {
			addr, err := g.Owner(r.Context(), id)
			switch {
			case err != nil:
				moving(w, err)
				return
			case addr != "":
				writeErr(w, http.StatusServiceUnavailable, shared.CodeUnavailable, "the computer's ownership is moving between workers; retry")
				return
			}
		}
		h := api
		if op {
			h = httpapi.AsOperator(api)
		}
		h.ServeHTTP(w, r)
	})
}

// statusOf keeps the status a relayed answer was sent with (0: none).
type statusOf struct {
	http.ResponseWriter
	status int
}

func (s *statusOf) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusOf) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets the proxy reach the connection (flushes, websockets).
func (s *statusOf) Unwrap() http.ResponseWriter { return s.ResponseWriter }
