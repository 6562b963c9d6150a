// Package httpapi is the worker's HTTP API (CONTROL-PLANE.md, Routes):
// computers and their capabilities, bots, runs with their SSE events, and the
// tools callable directly. Every /v1 route needs the worker's bearer token;
// every per-computer route also needs the computer's capability, and a
// capability that does not match answers 404, as if the computer did not
// exist. The one exception is the CDP websocket with a ticket (cdp.go):
// the single-use ticket, minted with both, stands for them. Operator
// actions (adopt, dashboard sign-in links, attach) need the operator's
// credential instead: a request that came over the operator socket
// (AsOperator) or the bearer WORKER_OPERATOR_TOKEN; the caller's token
// never suffices.
package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/capability"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/metrics"
	"github.com/open-bot/computer/apps/worker/internal/openapi"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/tracing"
	"github.com/open-bot/computer/pkg/shared"
)

// Options configures the API.
type Options struct {
	Token string
	// OperatorToken, when set, is the operator's bearer token over TCP
	// (WORKER_OPERATOR_TOKEN); "" leaves the operator socket the only way.
	OperatorToken string
	Computers     *computers.Service
	Runs          *runs.Manager
	Log           zerolog.Logger
	// Mount, when set, adds more per-computer routes (takeover, checkpoint)
	// to the mux; gate wraps a handler with the capability check.
	Mount func(mux *http.ServeMux, gate func(http.HandlerFunc) http.HandlerFunc)
	// Metrics counts requests by route (nil: none).
	Metrics *metrics.Metrics
	// Tracing makes a server span of each request (nil: none).
	Tracing *tracing.Tracing
}

// Handler returns the API's handler.
func Handler(o Options) http.Handler {
	a := &api{o: o, tokenHash: sha256.Sum256([]byte(o.Token))}
	if o.OperatorToken != "" {
		h := sha256.Sum256([]byte(o.OperatorToken))
		a.opHash = &h
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })

	mux.HandleFunc("POST /v1/computers", a.createComputer)
	mux.HandleFunc("GET /v1/computers", a.listComputers)
	mux.HandleFunc("POST /v1/computers/{id}/adopt", Operator(a.adopt))
	mux.HandleFunc("POST /v1/scopes/{scope}/restore-key", Operator(a.mintRestoreKey))
	mux.HandleFunc("GET /v1/computers/{id}", a.gate(a.getComputer))
	mux.HandleFunc("POST /v1/computers/{id}/start", a.gate(a.lifecycle(a.o.Computers.Start)))
	mux.HandleFunc("POST /v1/computers/{id}/recover", a.gate(a.lifecycle(a.o.Computers.Start)))
	mux.HandleFunc("POST /v1/computers/{id}/stop", a.gate(a.lifecycle(a.o.Computers.Stop)))
	mux.HandleFunc("DELETE /v1/computers/{id}", a.gate(a.destroyComputer))
	mux.HandleFunc("POST /v1/computers/{id}/bots", a.gate(a.addBot))
	mux.HandleFunc("DELETE /v1/computers/{id}/bots/{bot}", a.gate(a.removeBot))
	mux.HandleFunc("POST /v1/computers/{id}/secrets", a.gate(a.putSecret))
	mux.HandleFunc("GET /v1/computers/{id}/secrets", a.gate(a.listSecrets))
	mux.HandleFunc("DELETE /v1/computers/{id}/secrets/{name}", a.gate(a.deleteSecret))

	mux.HandleFunc("POST /v1/computers/{id}/runs", a.gate(a.startRun))
	mux.HandleFunc("GET /v1/computers/{id}/runs/{run}", a.gate(a.getRun))
	mux.HandleFunc("GET /v1/computers/{id}/runs/{run}/events", a.gate(a.events))
	mux.HandleFunc("POST /v1/computers/{id}/runs/{run}/stop", a.gate(a.stopRun))
	mux.HandleFunc("POST /v1/computers/{id}/runs/{run}/resume", a.gate(a.resumeRun))

	mux.HandleFunc("GET /v1/tools", a.listTools)
	mux.HandleFunc("GET "+openapi.Path, openapi.Serve)
	mux.HandleFunc("POST /v1/computers/{id}/tools/{name}", a.gate(a.callTool))

	// Takeover and checkpoint routes are mounted here (helper "homes").
	if o.Mount != nil {
		o.Mount(mux, a.gate)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, shared.CodeNotFound, "no such route")
	})
	a.mux = mux
	return a.accessLog(a.auth(mux))
}

type api struct {
	o         Options
	tokenHash [32]byte
	opHash    *[32]byte // the operator token's, when one is set
	mux       *http.ServeMux
}

// operatorKey marks a request made with the operator's credential.
type operatorKey struct{}

// AsOperator marks every request h serves as the operator's: only the
// operator socket's server (peer credentials checked) wraps its handler
// with it.
func AsOperator(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, true)))
	})
}

// IsOperator reports whether r carries the operator's credential.
func IsOperator(r *http.Request) bool {
	v, _ := r.Context().Value(operatorKey{}).(bool)
	return v
}

// OperatorOnly is the answer to an operator action asked with the caller's
// token (or none of the operator's credentials).
const OperatorOnly = "this is an operator action: it needs the operator's credential (the worker's operator socket, DATA_DIR/operator.sock, which the CLI uses on the worker's host, or WORKER_OPERATOR_TOKEN), never WORKER_TOKEN"

// Operator admits only the operator; it is checked before anything is
// looked up, so the answer says nothing about the computer.
func Operator(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !IsOperator(r) {
			writeErr(w, http.StatusForbidden, shared.CodeForbidden, OperatorOnly)
			return
		}
		h(w, r)
	}
}

// statusWriter records the status for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
	// internal is the error fail answered 500 for: the caller sees
	// "internal error", the access log the cause (logCause).
	internal error
}

// noteInternal hands err to the access log's statusWriter under w.
func noteInternal(w http.ResponseWriter, err error) {
	for w != nil {
		if sw, ok := w.(*statusWriter); ok {
			sw.internal = err
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// urlQuery is a URL's query in an error's text.
var urlQuery = regexp.MustCompile(`(https?://[^\s?"']*)\?[^\s"']*`)

// logCause is an internal error's text as the log may keep it: URLs lose
// their query (a credential could ride in one; the clients put theirs in
// headers and scrub their errors), and it is cut at 400 bytes.
func logCause(err error) string {
	s := urlQuery.ReplaceAllString(err.Error(), "$1?…")
	if len(s) > 400 {
		s = strings.ToValidUTF8(s[:400], "") + "…"
	}
	return s
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// accessLog logs method, path, status and duration: never a header, query
// or body (credentials travel in headers). With tracing on, the request
// is a server span named by its route and the line carries its trace_id.
func (a *api) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		// The route is the pattern that serves r ("" for none): the
		// metrics' label and the span's name, never the path with its ids.
		_, route := a.mux.Handler(r)
		ctx, endSpan := a.o.Tracing.Request(r.Context(), r.Method, route)
		if ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(sw, r)
		endSpan(sw.status)
		a.o.Metrics.Request(route, sw.status, time.Since(start))
		ev := a.o.Log.Info()
		if sw.internal != nil {
			ev = a.o.Log.Error().Str("cause", logCause(sw.internal))
		}
		tracing.Log(ctx, ev).Str("method", r.Method).Str("path", r.URL.Path).Int("status", sw.status).
			Int64("duration_ms", time.Since(start).Milliseconds()).Msg("request")
	})
}

func (a *api) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		if IsOperator(r) { // the operator socket: its peer was checked
			next.ServeHTTP(w, r)
			return
		}
		if cdpTicketed(r) { // the ticket is the credential (MountCDP redeems it)
			next.ServeHTTP(w, withTicket(r))
			return
		}
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		h := sha256.Sum256([]byte(tok))
		switch {
		case ok && subtle.ConstantTimeCompare(h[:], a.tokenHash[:]) == 1:
			next.ServeHTTP(w, r)
		case ok && a.opHash != nil && subtle.ConstantTimeCompare(h[:], a.opHash[:]) == 1:
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, true)))
		default:
			writeErr(w, http.StatusUnauthorized, shared.CodeUnauthorized, "missing or invalid bearer token")
		}
	})
}

// gate admits a per-computer request only with that computer's capability;
// anything else is the same 404 as an unknown computer.
func (a *api) gate(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if !computers.ValidID(id) || !a.o.Computers.Caps().Check(id, r.Header.Get(capability.Header)) {
			fail(w, computers.ErrNotFound)
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code shared.Code, msg string) {
	writeJSON(w, status, shared.ErrorEnvelope{Error: shared.ErrorBody{Code: code, Message: msg}})
}

// fail renders any error as the envelope; internals never reach the caller.
func fail(w http.ResponseWriter, err error) {
	var ae *shared.APIError
	switch {
	case errors.As(err, &ae):
		writeErr(w, ae.Status, ae.Code, ae.Message)
	case errors.Is(err, store.ErrNotFound):
		writeErr(w, http.StatusNotFound, shared.CodeNotFound, "not found")
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		writeErr(w, http.StatusServiceUnavailable, shared.CodeUnavailable, "the worker's database is unavailable; try again")
	case errors.Is(err, store.ErrStaleEpoch):
		writeErr(w, http.StatusConflict, shared.CodeConflict, "stale lease epoch: another holder owns this bot now")
	default:
		noteInternal(w, err)
		writeErr(w, http.StatusInternalServerError, shared.CodeInternal, "internal error")
	}
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	return decodeMax(w, r, v, 1<<20)
}

// maxToolBody fits a tool call carrying 1 MiB of text (clipboard_write,
// file_write) however JSON escapes it.
const maxToolBody = 8 << 20

// decodeMax is decode with a body limit of max bytes.
func decodeMax(w http.ResponseWriter, r *http.Request, v any, max int64) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, max))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeErr(w, http.StatusRequestEntityTooLarge, shared.CodeTooLarge, "body too large")
		} else {
			writeErr(w, http.StatusBadRequest, shared.CodeInvalidJSON, "invalid JSON: "+err.Error())
		}
		return false
	}
	return true
}
