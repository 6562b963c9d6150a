package machines

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Botd is the botd machine: every operation is a call to one botd's API.
// The botd's address and token stay inside it: callers get operations,
// never the client, the URL or the token.
type Botd struct {
	c *client.Client
}

// NewBotd returns the machine of the botd at baseURL (http://host:port)
// reached with token.
func NewBotd(baseURL, token string) *Botd {
	return &Botd{c: client.New(baseURL, token, nil)}
}

// BotdOf wraps an existing botd client (a provider or test that built one).
func BotdOf(c *client.Client) *Botd { return &Botd{c: c} }

// wsURL is botd's websocket URL for path.
func (b *Botd) wsURL(path string) string {
	return "ws" + strings.TrimPrefix(b.c.BaseURL(), "http") + path
}

// wsClient is the HTTP client of botd's websocket dials: the botd
// client's own (a vendor sandbox's botd is reached only through its
// in-process forwarder), its timeout client.CallTimeout: coder/websocket
// bounds only the handshake with it (a botd that never answers the
// upgrade fails the dial), and the connection then lives on.
func (b *Botd) wsClient() *http.Client {
	hc := *b.c.HTTPClient()
	hc.Timeout = client.CallTimeout
	return &hc
}

// bearer is the header botd's websocket routes authenticate with.
func (b *Botd) bearer() http.Header {
	return http.Header{"Authorization": {"Bearer " + b.c.Token()}}
}

// Health implements Machine.
func (b *Botd) Health(ctx context.Context) (shared.ComputerHealth, error) { return b.c.Health(ctx) }

// CheckScreen implements Machine: botd itself answers
// MULTI_SCREEN_UNAVAILABLE when its screens are all taken.
func (*Botd) CheckScreen(context.Context, string) error { return nil }

// StartScreen implements Machine.
func (b *Botd) StartScreen(ctx context.Context, id string) (client.Screen, error) {
	return b.c.StartScreen(ctx, id)
}

// Screens implements Machine.
func (b *Botd) Screens(ctx context.Context) ([]client.Screen, error) { return b.c.Screens(ctx) }

// ForgetScreen implements Machine: DELETE /screens/{id}.
func (b *Botd) ForgetScreen(ctx context.Context, id string) error {
	return b.c.ForgetScreen(ctx, id)
}

// AcquireLease implements Machine.
func (b *Botd) AcquireLease(ctx context.Context, id, kind, holder string, ttl time.Duration) (client.Lease, error) {
	return b.c.AcquireLease(ctx, id, kind, holder, ttl)
}

// ReleaseLease implements Machine.
func (b *Botd) ReleaseLease(ctx context.Context, id, leaseID string) error {
	return b.c.ReleaseLease(ctx, id, leaseID)
}

// Observe implements Machine.
func (b *Botd) Observe(ctx context.Context, id, leaseID string) (client.Observation, error) {
	return b.c.Observe(ctx, id, leaseID)
}

// Act implements Machine.
func (b *Botd) Act(ctx context.Context, id, leaseID string, actions []shared.Action) (client.ActResult, error) {
	return b.c.Act(ctx, id, leaseID, actions)
}

// Open implements Machine.
func (b *Botd) Open(ctx context.Context, id, leaseID, target string) (json.RawMessage, error) {
	return b.c.Open(ctx, id, leaseID, target)
}

// Windows implements Machine.
func (b *Botd) Windows(ctx context.Context, id, leaseID string) ([]shared.Window, error) {
	return b.c.Windows(ctx, id, leaseID)
}

// Clipboard implements Machine.
func (b *Botd) Clipboard(ctx context.Context, id, leaseID string) (string, error) {
	return b.c.Clipboard(ctx, id, leaseID)
}

// SetClipboard implements Machine.
func (b *Botd) SetClipboard(ctx context.Context, id, leaseID, text string) error {
	return b.c.SetClipboard(ctx, id, leaseID, text)
}

// Launch implements Machine.
func (b *Botd) Launch(ctx context.Context, id, leaseID, app string) (json.RawMessage, error) {
	return b.c.Launch(ctx, id, leaseID, app)
}

// TypeSecret implements Machine.
func (b *Botd) TypeSecret(ctx context.Context, id, leaseID, origin, secret string, visible bool) error {
	return b.c.TypeSecret(ctx, id, leaseID, origin, secret, visible)
}

// ReadPage implements Machine.
func (b *Botd) ReadPage(ctx context.Context, id string) (client.Page, error) {
	return b.c.ReadPage(ctx, id)
}

// BrowserPages implements Machine: GET /screens/{id}/browser/pages.
func (b *Botd) BrowserPages(ctx context.Context, id string) ([]string, error) {
	var r struct {
		Pages []string `json:"pages"`
	}
	if err := b.c.Do(ctx, http.MethodGet, "/screens/"+url.PathEscape(id)+"/browser/pages", nil, &r); err != nil {
		return nil, err
	}
	return r.Pages, nil
}

// Exec implements Machine.
func (b *Botd) Exec(ctx context.Context, req client.ExecRequest) (client.ExecResult, error) {
	return b.c.Exec(ctx, req)
}

// ReadFile implements Machine.
func (b *Botd) ReadFile(ctx context.Context, path string, max int64) ([]byte, error) {
	return b.c.ReadFile(ctx, path, max)
}

// WriteFile implements Machine.
func (b *Botd) WriteFile(ctx context.Context, path string, data []byte) error {
	return b.c.WriteFile(ctx, path, data)
}

// ListFiles implements Machine.
func (b *Botd) ListFiles(ctx context.Context, path string) (json.RawMessage, error) {
	return b.c.ListFiles(ctx, path)
}

// ViewerToken implements Machine.
func (b *Botd) ViewerToken(ctx context.Context, id, mode, holder string, ttl time.Duration) (client.ViewerLink, error) {
	return b.c.ViewerToken(ctx, id, mode, holder, ttl)
}

// DialVNC implements Machine: botd's RFB websocket of screen id, the
// link's token in the X-Viewer-Token header (botd takes the mode from the
// link), binary subprotocol. The caller relays it and closes it.
func (b *Botd) DialVNC(ctx context.Context, id string, link client.ViewerLink) (*websocket.Conn, error) {
	c, _, err := websocket.Dial(ctx, b.wsURL("/screens/"+url.PathEscape(id)+"/vnc"),
		&websocket.DialOptions{Subprotocols: []string{"binary"}, HTTPHeader: http.Header{"X-Viewer-Token": {link.Token}}, HTTPClient: b.wsClient()})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// DialCDP implements Machine: botd's /screens/{id}/cdp websocket under
// the bearer token, the lease in X-Lease-Id. botd's JSON refusal before
// the upgrade (no such screen, lease required, a person in control,
// another CDP session, the screen not running) comes back as a
// *client.Error with its status and code; anything else (botd did not
// answer the upgrade) is an error without one.
func (b *Botd) DialCDP(ctx context.Context, screenID, leaseID string) (*websocket.Conn, error) {
	h := b.bearer()
	h.Set(client.HeaderLeaseID, leaseID)
	c, resp, err := websocket.Dial(ctx, b.wsURL("/screens/"+url.PathEscape(screenID)+"/cdp"),
		&websocket.DialOptions{HTTPHeader: h, HTTPClient: b.wsClient()})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, refusal(resp)
		}
		return nil, fmt.Errorf("dial botd's cdp: %w", err)
	}
	return c, nil
}

// refusal is botd's answer to a websocket dial it refused: its error
// envelope (coder/websocket keeps the first KiB of the body), else the
// status alone.
func refusal(resp *http.Response) error {
	var env shared.ErrorEnvelope
	if resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
			return &client.Error{Status: resp.StatusCode, Code: env.Error.Code, Message: env.Error.Message}
		}
	}
	code := shared.CodeInternal
	switch resp.StatusCode {
	case http.StatusNotFound:
		code = shared.CodeNotFound
	case http.StatusConflict:
		code = shared.CodeConflict
	}
	return &client.Error{Status: resp.StatusCode, Code: code, Message: fmt.Sprintf("botd refused the CDP session (HTTP %d)", resp.StatusCode)}
}

// ExportWorkspace implements Machine (client.ExportWorkspaceMax: the
// reader fails with ErrExportIncomplete or ErrExportRefused rather than
// end early).
func (b *Botd) ExportWorkspace(ctx context.Context, maxBytes int64) (io.ReadCloser, error) {
	if maxBytes < 0 {
		maxBytes = 0
	}
	return b.c.ExportWorkspaceMax(ctx, maxBytes)
}

// ImportWorkspace implements Machine.
func (b *Botd) ImportWorkspace(ctx context.Context, r io.Reader) (client.WorkspaceSummary, error) {
	return b.c.ImportWorkspace(ctx, r)
}

// DialEvents implements Machine: botd's /events websocket under the
// bearer token.
func (b *Botd) DialEvents(ctx context.Context) (*websocket.Conn, error) {
	c, _, err := websocket.Dial(ctx, b.wsURL("/events"), &websocket.DialOptions{HTTPHeader: b.bearer(), HTTPClient: b.wsClient()})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// DialAgent implements Machine: a fresh Codex app-server on botd's /agent
// websocket under the bearer token.
func (b *Botd) DialAgent(ctx context.Context, h codexrpc.Handler) (*codexrpc.Conn, error) {
	return codexrpc.DialClient(ctx, b.wsURL("/agent"), b.bearer(), b.wsClient(), h)
}

var _ Machine = (*Botd)(nil)
