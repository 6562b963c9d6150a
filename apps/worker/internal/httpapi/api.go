// Package httpapi is the worker's HTTP API: start a run for a bot, stream its
// events (SSE), stop or resume it; and the same tools callable directly by
// any other harness. Every route needs the worker's bearer token.
package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/tools"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Options configures the API.
type Options struct {
	Token string
	Runs  *runs.Manager
	Botd  *client.Client
	Log   zerolog.Logger
}

// Handler returns the API's handler.
func Handler(o Options) http.Handler {
	a := &api{o: o, tokenHash: sha256.Sum256([]byte(o.Token))}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("POST /v1/runs", a.startRun)
	mux.HandleFunc("GET /v1/runs/{id}", a.getRun)
	mux.HandleFunc("GET /v1/runs/{id}/events", a.events)
	mux.HandleFunc("POST /v1/runs/{id}/stop", a.stopRun)
	mux.HandleFunc("POST /v1/runs/{id}/resume", a.resumeRun)
	mux.HandleFunc("GET /v1/tools", a.listTools)
	mux.HandleFunc("POST /v1/tools/{name}", a.callTool)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, shared.CodeNotFound, "no such route")
	})
	return a.auth(mux)
}

type api struct {
	o         Options
	tokenHash [32]byte
}

func (a *api) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		h := sha256.Sum256([]byte(tok))
		if !ok || subtle.ConstantTimeCompare(h[:], a.tokenHash[:]) != 1 {
			writeErr(w, http.StatusUnauthorized, shared.CodeUnauthorized, "missing or invalid bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code shared.Code, msg string) {
	writeJSON(w, status, shared.ErrorEnvelope{Error: shared.ErrorBody{Code: code, Message: msg}})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
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

func (a *api) startRun(w http.ResponseWriter, r *http.Request) {
	var req runs.StartRequest
	if !decode(w, r, &req) {
		return
	}
	run, err := a.o.Runs.Start(req)
	if err != nil {
		writeErr(w, http.StatusBadRequest, shared.CodeBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, run.Snapshot())
}

func (a *api) run(w http.ResponseWriter, r *http.Request) *runs.Run {
	run, err := a.o.Runs.Get(r.PathValue("id"))
	if err != nil {
		writeErr(w, http.StatusNotFound, shared.CodeNotFound, "no such run")
		return nil
	}
	return run
}

func (a *api) getRun(w http.ResponseWriter, r *http.Request) {
	if run := a.run(w, r); run != nil {
		writeJSON(w, http.StatusOK, run.Snapshot())
	}
}

func (a *api) stopRun(w http.ResponseWriter, r *http.Request) {
	if run := a.run(w, r); run != nil {
		run.Stop()
		select {
		case <-run.Done():
		case <-time.After(15 * time.Second):
		}
		writeJSON(w, http.StatusOK, run.Snapshot())
	}
}

func (a *api) resumeRun(w http.ResponseWriter, r *http.Request) {
	if run := a.run(w, r); run != nil {
		if err := run.Resume(); err != nil {
			writeErr(w, http.StatusConflict, shared.CodeConflict, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, run.Snapshot())
	}
}

// events streams the run's events as server-sent events, history first.
func (a *api) events(w http.ResponseWriter, r *http.Request) {
	run := a.run(w, r)
	if run == nil {
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	ch, cancel := run.Subscribe()
	defer cancel()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepalive.C:
			_, _ = fmt.Fprint(w, ": keepalive\n\n")
			_ = rc.Flush()
		case e, ok := <-ch:
			if !ok {
				b, _ := json.Marshal(run.Snapshot())
				_, _ = fmt.Fprintf(w, "event: end\ndata: %s\n\n", b)
				_ = rc.Flush()
				return
			}
			b, _ := json.Marshal(e)
			_, _ = fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, b)
			_ = rc.Flush()
		}
	}
}

// ToolSpec is a tool as GET /v1/tools lists it.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

func (a *api) listTools(w http.ResponseWriter, r *http.Request) {
	out := make([]ToolSpec, 0, len(tools.All))
	for _, t := range tools.All {
		if t.Name == "request_takeover" {
			continue // only inside a run
		}
		out = append(out, ToolSpec{Name: t.Name, Description: t.Description, InputSchema: json.RawMessage(t.Schema)})
	}
	writeJSON(w, http.StatusOK, out)
}

// callTool is the direct tool API for other harnesses:
// POST /v1/tools/{name} {"botId":"…","arguments":{…}}. The caller's session
// (and lease) is keyed by bot id; POST with "release":true gives it back.
func (a *api) callTool(w http.ResponseWriter, r *http.Request) {
	var req struct {
		BotID     string          `json:"botId"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if !decode(w, r, &req) {
		return
	}
	sess, err := tools.NewSession(a.o.Botd, req.BotID, "harness-"+req.BotID)
	if err != nil {
		writeErr(w, http.StatusBadRequest, shared.CodeBadRequest, err.Error())
		return
	}
	if _, ok := tools.Find(r.PathValue("name")); !ok {
		writeErr(w, http.StatusNotFound, shared.CodeNotFound, "no such tool")
		return
	}
	res := tools.Call(r.Context(), sess, r.PathValue("name"), req.Arguments)
	// A direct call is one-shot: give the lease back at once.
	sess.Release(r.Context())
	writeJSON(w, res.Status, res)
}
