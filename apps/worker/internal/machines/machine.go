// Package machines is what tools, runs, takeover and checkpoints use to reach
// one running computer (CONTROL-PLANE.md, Providers: "A Machine is
// operations, not a botd client"). Two implementations live beside this
// file: the botd machine (every operation forwarded to botd's API) and the
// command-driven desktop machine (a backend's exec and files drive X, the
// worker holding the leases). Providers make machines; nothing outside a
// machine knows which kind it holds.
//
// The data types are botd's wire types (pkg/shared/client): they are the
// contract both implementations answer with.
package machines

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/coder/websocket"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Machine is one running computer.
//
// Errors a caller acts on are *client.Error values with botd's codes
// (shared.CodeMultiScreen, lease conflicts, not found, …), whichever
// implementation answers, so tools map them to the same answers.
type Machine interface {
	// Health is the machine's readiness (botd's /health, or the
	// command-driven machine's probe of its backend and display 0).
	Health(ctx context.Context) (shared.ComputerHealth, error)
	// CheckScreen reports whether a graphical tool may use screenID: a
	// single-screen backend answers a shared.CodeMultiScreen error for any
	// screen but its first, and starts nothing.
	CheckScreen(ctx context.Context, screenID string) error

	// Screens.
	StartScreen(ctx context.Context, id string) (client.Screen, error)
	Screens(ctx context.Context) ([]client.Screen, error)
	// ForgetScreen stops a screen and forgets its browser profile.
	ForgetScreen(ctx context.Context, id string) error

	// Leases: one agent or one person per screen, with preemption.
	AcquireLease(ctx context.Context, id, kind, holder string, ttl time.Duration) (client.Lease, error)
	ReleaseLease(ctx context.Context, id, leaseID string) error

	// Observe and ordered, batched act under a lease.
	Observe(ctx context.Context, id, leaseID string) (client.Observation, error)
	Act(ctx context.Context, id, leaseID string, actions []shared.Action) (client.ActResult, error)
	// Browser and app helpers. A machine without a managed browser answers
	// a *client.Error (501, shared.CodeUnavailable) with a
	// message saying what to use instead.
	Open(ctx context.Context, id, leaseID, target string) (json.RawMessage, error)
	Launch(ctx context.Context, id, leaseID, app string) (json.RawMessage, error)
	// TypeSecret types secret into the focused field only on origin, and
	// (unless visible) only into a masked password field.
	TypeSecret(ctx context.Context, id, leaseID, origin, secret string, visible bool) error
	ReadPage(ctx context.Context, id string) (client.Page, error)
	// BrowserPages lists the URLs open in the screen's browser.
	BrowserPages(ctx context.Context, id string) ([]string, error)
	// Windows lists the screen's application windows (window actions go
	// through Act); Clipboard and SetClipboard read and set its clipboard
	// text. A machine that cannot answers 501 shared.CodeUnavailable.
	Windows(ctx context.Context, id, leaseID string) ([]shared.Window, error)
	Clipboard(ctx context.Context, id, leaseID string) (string, error)
	SetClipboard(ctx context.Context, id, leaseID, text string) error

	// Shell and files, rooted as botd roots them (relative paths are under
	// the workspace).
	Exec(ctx context.Context, req client.ExecRequest) (client.ExecResult, error)
	ReadFile(ctx context.Context, path string, max int64) ([]byte, error)
	WriteFile(ctx context.Context, path string, data []byte) error
	ListFiles(ctx context.Context, path string) (json.RawMessage, error)

	// Viewer links and the RFB stream behind them. DialVNC opens the
	// screen's websocket VNC stream with a link ViewerToken made (the
	// link's token travels in a header, never a URL).
	ViewerToken(ctx context.Context, id, mode, holder string, ttl time.Duration) (client.ViewerLink, error)
	DialVNC(ctx context.Context, id string, link client.ViewerLink) (*websocket.Conn, error)
	// DialCDP opens a Chrome DevTools Protocol session on the screen's
	// managed browser under the agent lease leaseID (botd's
	// /screens/{id}/cdp: CDP JSON in text messages both ways, the root
	// session the browser target). botd keeps the lease while the session
	// is open and closes it with a code that says why (4001 a person took
	// over, 4002 the lease was lost, 1012 the browser restarted, 1008 a
	// bound). A refusal before the upgrade is a *client.Error with botd's
	// status and code; a machine without a managed browser answers 501
	// shared.CodeUnavailable.
	DialCDP(ctx context.Context, screenID, leaseID string) (*websocket.Conn, error)

	// The portable workspace as a tar stream (maxBytes ≤ 0: no limit).
	ExportWorkspace(ctx context.Context, maxBytes int64) (io.ReadCloser, error)
	ImportWorkspace(ctx context.Context, r io.Reader) (client.WorkspaceSummary, error)

	// DialEvents opens the machine's event stream (botd's /events
	// messages: {type, at, data} JSON texts).
	DialEvents(ctx context.Context) (*websocket.Conn, error)
	// DialAgent opens a connection to a fresh Codex app-server on the
	// machine, its notifications and server requests going to h.
	DialAgent(ctx context.Context, h codexrpc.Handler) (*codexrpc.Conn, error)
}
