// Package mcp serves the worker's tools over the Model Context Protocol
// (streamable HTTP at /mcp, github.com/modelcontextprotocol/go-sdk) and
// bridges a local MCP client on stdin/stdout to it (`worker mcp --stdio`).
//
// A session is bound to one computer and one bot: the worker's bearer token
// (checked by the API in front of this handler), the computer's capability
// in X-Computer-Capability and the bot in X-Bot-Id, on every request. The
// capability names the computer; the bot must be on it, and screens follow
// the namespace rule as on /v1. A request whose capability or bot does not
// hold is refused before the MCP layer sees it, with a JSON-RPC error body
// (and the HTTP status /v1 would give), so a client's connect fails with the
// reason. The tools are internal/tools' with their JSON schemas; a session
// keeps its agent leases between calls (so an unchanged screen comes back
// without bytes) and gives them back when it ends.
package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/capability"
	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/tools"
	"github.com/open-bot/computer/pkg/shared"
)

// BotHeader carries the session's bot id.
const BotHeader = "X-Bot-Id"

// Path is where the worker serves MCP.
const Path = "/mcp"

// SessionTimeout closes a session nobody used for this long (its leases
// are given back).
const SessionTimeout = 10 * time.Minute

// Options configures the handler.
type Options struct {
	Computers *computers.Service
	Log       zerolog.Logger
}

// Handler returns the /mcp handler. The caller's bearer token is checked in
// front of it (httpapi's auth).
func Handler(o Options) http.Handler {
	h := &handler{o: o, versions: gomcp.NewServer(impl, nil)}
	h.sh = gomcp.NewStreamableHTTPHandler(h.server, &gomcp.StreamableHTTPOptions{SessionTimeout: SessionTimeout})
	return h
}

var impl = &gomcp.Implementation{Name: "open-bot-worker", Title: "open-bot computer", Version: "1"}

type handler struct {
	o  Options
	sh *gomcp.StreamableHTTPHandler
	// versions answers the SDK's protocol-version question for requests of
	// an existing session (their server is the session's own).
	versions *gomcp.Server
}

// binding is what a session is bound to.
type binding struct{ computer, bot string }

type bindingKey struct{}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := h.bind(r.Context(), r.Header)
	if err != nil {
		refuse(w, r, err)
		return
	}
	h.sh.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bindingKey{}, b)))
}

// bind resolves a request's capability and bot, as /v1's gate and HasBot do.
func (h *handler) bind(ctx context.Context, hdr http.Header) (binding, error) {
	id, ok := h.o.Computers.Caps().Lookup(hdr.Get(capability.Header))
	if !ok {
		return binding{}, &shared.APIError{Status: http.StatusNotFound, Code: shared.CodeNotFound,
			Message: "no computer has this " + capability.Header + " (missing, wrong, or forgotten by a worker restart: adopt mints a new one)"}
	}
	bot := hdr.Get(BotHeader)
	if bot == "" {
		return binding{}, &shared.APIError{Status: http.StatusBadRequest, Code: shared.CodeInvalidID,
			Message: BotHeader + " is required: the bot this session acts as (one on the computer)"}
	}
	if _, err := h.o.Computers.HasBot(ctx, id, bot); err != nil {
		return binding{}, apiError(err)
	}
	return binding{computer: id, bot: bot}, nil
}

// apiError is err as the envelope /v1 would answer; internals never reach
// the caller.
func apiError(err error) *shared.APIError {
	var ae *shared.APIError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, store.ErrNotFound):
		return &shared.APIError{Status: http.StatusNotFound, Code: shared.CodeNotFound, Message: "not found"}
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return &shared.APIError{Status: http.StatusServiceUnavailable, Code: shared.CodeUnavailable, Message: "the worker's database is unavailable; try again"}
	default:
		return &shared.APIError{Status: http.StatusInternalServerError, Code: shared.CodeInternal, Message: "internal error"}
	}
}

// RefusedCode is the JSON-RPC error code of a request refused for its
// credentials or bot (the stable code is in the error's data).
const RefusedCode = -32001

// refuse answers a refused request with the HTTP status and a JSON-RPC
// error (for the request's id when it has one), which MCP clients surface.
func refuse(w http.ResponseWriter, r *http.Request, err error) {
	ae := apiError(err)
	var id jsonrpc.ID
	if r.Method == http.MethodPost && r.Body != nil {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if msg, derr := jsonrpc.DecodeMessage(body); derr == nil {
			if req, ok := msg.(*jsonrpc.Request); ok {
				id = req.ID
			}
		}
	}
	data, _ := json.Marshal(map[string]any{"code": ae.Code, "status": ae.Status})
	resp := &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: RefusedCode, Message: fmt.Sprintf("%s: %s", ae.Code, ae.Message), Data: data}}
	b, _ := jsonrpc.EncodeMessage(resp)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ae.Status)
	_, _ = w.Write(b)
}

// server is the SDK's getServer: a new session gets its own server bound
// to the request's computer and bot.
func (h *handler) server(r *http.Request) *gomcp.Server {
	b, ok := r.Context().Value(bindingKey{}).(binding)
	if !ok {
		return nil
	}
	if r.Header.Get("Mcp-Session-Id") != "" {
		return h.versions
	}
	s := &session{h: h, b: b}
	srv := gomcp.NewServer(impl, &gomcp.ServerOptions{
		Instructions: fmt.Sprintf("You act as bot %q on one open-bot computer: your screen is %q (or %q-<suffix>), your folder bots/%s/ in the workspace.", b.bot, b.bot, b.bot, b.bot),
		InitializedHandler: func(_ context.Context, req *gomcp.InitializedRequest) {
			go func() {
				_ = req.Session.Wait()
				s.close()
			}()
		},
	})
	for _, t := range tools.All {
		if t.Name == "request_takeover" {
			continue // only inside a run, as on /v1
		}
		srv.AddTool(&gomcp.Tool{Name: t.Name, Description: t.Description, InputSchema: json.RawMessage(t.Schema)}, s.handler(t.Name))
	}
	return srv
}

// session is one MCP session's use of the tools.
type session struct {
	h *handler
	b binding
	// mu serialises the session's calls and guards ts and closed.
	mu     sync.Mutex
	ts     *tools.Session
	closed bool
}

func (s *session) handler(name string) gomcp.ToolHandler {
	return func(ctx context.Context, req *gomcp.CallToolRequest) (*gomcp.CallToolResult, error) {
		// Every request was bound by ServeHTTP; the session stays with the
		// computer and bot it was opened for.
		if req.Extra != nil && req.Extra.Header != nil {
			cur, err := s.h.bind(ctx, req.Extra.Header)
			if err != nil {
				ae := apiError(err)
				return toolError(ae.Code, ae.Message), nil
			}
			if cur != s.b {
				return toolError(shared.CodeForbidden, fmt.Sprintf("this session is bound to bot %q on the computer it was opened for: open a new session for another", s.b.bot)), nil
			}
		}
		var args json.RawMessage
		if req.Params != nil {
			args = req.Params.Arguments
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return toolError(shared.CodeConflict, "the session has ended"), nil
		}
		m, err := s.h.o.Computers.Machine(ctx, s.b.computer)
		if err != nil {
			ae := apiError(err)
			return toolError(ae.Code, ae.Message), nil
		}
		if s.ts == nil {
			ts, err := tools.NewSession(m, s.b.bot, "mcp-"+s.b.bot)
			if err != nil {
				return toolError(shared.CodeInvalidID, err.Error()), nil
			}
			ts.Secret, ts.SecretNames = s.h.o.Computers.SecretOpener(s.b.computer)
			s.h.o.Computers.InstrumentTools(ctx, ts, s.b.computer, "")
			s.ts = ts
		}
		// The computer's machine may have been replaced since the last
		// call: a lease botd no longer knows is acquired anew.
		s.ts.Machine = m
		s.ts.CheckScreen = m.CheckScreen
		return Result(tools.Call(ctx, s.ts, name, args)), nil
	}
}

// close gives back the session's leases.
func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.ts != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.ts.Release(ctx)
	}
}

// Result is a tool result as MCP content: text as text, screenshots as
// JPEG image content (an unchanged frame has none: its text says so), a
// failed call as a tool error whose text and structured content carry the
// stable code.
func Result(r tools.Result) *gomcp.CallToolResult {
	out := &gomcp.CallToolResult{IsError: !r.Success}
	for _, c := range r.Content {
		switch c.Type {
		case "image":
			data, ok := strings.CutPrefix(c.ImageURL, "data:image/jpeg;base64,")
			b, err := base64.StdEncoding.DecodeString(data)
			if !ok || err != nil {
				out.Content = append(out.Content, &gomcp.TextContent{Text: "(a screenshot that could not be decoded)"})
				continue
			}
			out.Content = append(out.Content, &gomcp.ImageContent{Data: b, MIMEType: "image/jpeg"})
		default:
			out.Content = append(out.Content, &gomcp.TextContent{Text: c.Text})
		}
	}
	if !r.Success {
		msg := ""
		if len(r.Content) > 0 {
			msg = r.Content[0].Text
		}
		out.StructuredContent = map[string]any{"error": map[string]any{"code": r.Code, "message": msg}}
	}
	return out
}

func toolError(code shared.Code, msg string) *gomcp.CallToolResult {
	text := fmt.Sprintf("error: %s: %s", code, msg)
	return &gomcp.CallToolResult{IsError: true, Content: []gomcp.Content{&gomcp.TextContent{Text: text}},
		StructuredContent: map[string]any{"error": map[string]any{"code": code, "message": text}}}
}
