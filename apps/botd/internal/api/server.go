// Package api is botd's HTTP front door: bearer auth (fails closed), the one
// error envelope for unknown routes and methods, panic recovery, access logs
// without secrets, the health and event routes, and the rotation of the
// bearer token (token.go). Domain packages register their own routes on the
// mux it hands out.
package api

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/health"
	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/pkg/shared"
)

// Options configures the server.
type Options struct {
	// Token is BOTD_TOKEN at start (PUT /token replaces it in memory);
	// compared in constant time, never logged.
	Token  string
	Log    zerolog.Logger
	Hub    *health.Hub
	Health *health.Model
}

// Server routes botd's API.
type Server struct {
	mux *http.ServeMux
	// tokenHash is the SHA-256 of the current bearer token, swapped whole
	// by a rotation: a request is checked against the old token or the new
	// one, never a mix.
	tokenHash atomic.Pointer[[32]byte]
	// rotateMu serializes rotations: one rotation's check of the current
	// token, its swap and its onRotate hooks end before the next begins, so
	// every consumer ends on the same token.
	rotateMu sync.Mutex
	// onRotate are told the new token after each rotation (the viewer-link
	// signer). Set during wiring, before serving; read-only after.
	onRotate []func(string)
	log      zerolog.Logger
	hub      *health.Hub
	health   *health.Model
	// selfAuthMatch are narrow matchers for routes that check their own signed
	// tokens (viewer links). Set during wiring, before serving; read-only after.
	selfAuthMatch []func(*http.Request) bool
}

// New builds the server with /healthz, /health, /events and PUT /token
// registered.
func New(o Options) *Server {
	s := &Server{mux: http.NewServeMux(), log: o.Log, hub: o.Hub, health: o.Health}
	h := sha256.Sum256([]byte(o.Token))
	s.tokenHash.Store(&h)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, s.health.Snapshot())
	})
	s.mux.HandleFunc("GET /events", s.events)
	s.mux.HandleFunc("PUT /token", s.rotate)
	return s
}

// Mux is where domain packages register their routes ("METHOD /path").
func (s *Server) Mux() *http.ServeMux { return s.mux }

// Handler is the whole middleware chain around the mux.
func (s *Server) Handler() http.Handler {
	return s.logged(s.recovered(s.authed(s.enveloped(s.mux))))
}

// Authorized reports whether r carries the token: the Authorization header
// always, ?token= only on a GET websocket upgrade (browsers cannot set
// headers on a websocket; a POST with an Upgrade header is no websocket).
// It always checks the current token: after a rotation the old one fails.
func (s *Server) Authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok && r.Method == http.MethodGet && isUpgrade(r) {
		tok, ok = r.URL.Query().Get("token"), true
	}
	return ok && s.isToken(tok)
}

// isToken reports whether tok is the current bearer token. Hashing first
// makes the comparison constant-time in length too.
func (s *Server) isToken(tok string) bool {
	if tok == "" {
		return false
	}
	h := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(h[:], s.tokenHash.Load()[:]) == 1
}

func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// publicRoutes need no token. Everything else fails closed.
var publicRoutes = map[string]bool{"GET /healthz": true, "HEAD /healthz": true}

func (s *Server) authed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if publicRoutes[r.Method+" "+r.URL.Path] || s.selfAuth(r) || s.Authorized(r) {
			next.ServeHTTP(w, r)
			return
		}
		unauthorized(w)
	})
}

// unauthorized is the answer to a request without the current token.
func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="botd"`)
	httpx.WriteError(w, http.StatusUnauthorized, shared.CodeUnauthorized, "missing or invalid bearer token")
}

// AllowSelfAuth lets a domain route check its own credentials (a signed
// link) instead of the bearer token. match must be exact and narrow.
func (s *Server) AllowSelfAuth(match func(*http.Request) bool) {
	s.selfAuthMatch = append(s.selfAuthMatch, match)
}

func (s *Server) selfAuth(r *http.Request) bool {
	for _, m := range s.selfAuthMatch {
		if m(r) {
			return true
		}
	}
	return false
}

// enveloped turns the mux's own plain-text 404 and 405 into the envelope.
func (s *Server) enveloped(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &capture{header: http.Header{}}
		mux.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusMethodNotAllowed:
			if allow := rec.header.Get("Allow"); allow != "" {
				w.Header().Set("Allow", allow)
			}
			httpx.WriteError(w, http.StatusMethodNotAllowed, shared.CodeMethodNotAllowed, "method "+r.Method+" is not allowed on this route")
		case http.StatusNotFound, 0:
			httpx.WriteError(w, http.StatusNotFound, shared.CodeNotFound, "no such route")
		default:
			// A redirect (e.g. path cleaning) or anything else: pass it on.
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body.Bytes())
		}
	})
}

type capture struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *capture) Header() http.Header { return c.header }
func (c *capture) WriteHeader(s int) {
	if c.status == 0 {
		c.status = s
	}
}
func (c *capture) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(b)
}

func (s *Server) recovered(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error().Str("method", r.Method).Str("path", r.URL.Path).Interface("panic", v).Msg("handler panicked")
				httpx.WriteError(w, http.StatusInternalServerError, shared.CodeInternal, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// logged writes one access line per request: method, path (never the query,
// which may carry a token), status and duration.
func (s *Server) logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if r.URL.Path == "/healthz" {
			return
		}
		s.log.Debug().Str("method", r.Method).Str("path", r.URL.Path).Int("status", sw.code()).
			Int64("elapsed_ms", time.Since(start).Milliseconds()).Msg("request")
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(c int) {
	if s.status == 0 {
		s.status = c
	}
	s.ResponseWriter.WriteHeader(c)
}
func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}
func (s *statusWriter) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// Unwrap lets http.ResponseController reach Flush and Hijack (websockets).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
