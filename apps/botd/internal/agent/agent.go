package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/supervisor"
	"github.com/open-bot/computer/pkg/shared"
)

// Options configures the Codex app-server.
type Options struct {
	// Bin is the codex executable.
	Bin string
	// Addr is host:port for `--listen ws://Addr`; loopback only.
	Addr string
	// CodexHome is $CODEX_HOME (the managed config.toml lives there).
	CodexHome string
	// Home is the bot user's HOME for the process.
	Home string
	User osuser.User
	// ExtraConfig is appended to the managed config.toml.
	ExtraConfig string
	// Env is extra environment for Codex (the model proxy's per-boot
	// token; never a provider's key).
	Env []string
	// Provider, when set, is the model provider Codex uses by default
	// (botd's model proxy).
	Provider *Provider
	Sup      *supervisor.Supervisor
}

// Agent is the running Codex app-server.
type Agent struct {
	opts Options
	proc *supervisor.Proc
	// token is this boot's capability for the app-server's websocket
	// (--ws-auth capability-token; only its SHA-256 is in Codex's argv).
	// Loopback is every local user's: without it any process on the host
	// (another local computer's bot, a desktop terminal) could open a
	// thread that runs commands as this computer's bot. Only the relay,
	// behind botd's own token, holds it.
	token string
}

// Start writes the managed config and starts `codex app-server` as the bot
// user with restart=always; it returns at once. Use WaitReady for /readyz.
func Start(o Options) (*Agent, error) {
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("codex listen address %q: %w", o.Addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("codex must listen on loopback, not %q", host)
	}
	if err := WriteConfig(o.CodexHome, o.User, o.Provider, o.ExtraConfig); err != nil {
		return nil, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("codex capability token: %w", err)
	}
	token := hex.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(token))
	u := o.User
	u.Home = o.Home
	bin, nativeEnv := resolveNative(o.Bin)
	env := append(append([]string{"CODEX_HOME=" + o.CodexHome}, nativeEnv...), o.Env...)
	spec := supervisor.Spec{
		Name:    "codex",
		Restart: supervisor.RestartAlways,
		Cmd: runner.Spec{
			Argv: []string{bin, "app-server", "--listen", "ws://" + o.Addr,
				"--ws-auth", "capability-token", "--ws-token-sha256", hex.EncodeToString(sum[:])},
			User: &u,
			Env:  env,
			Dir:  o.Home,
		},
		Ready:        func(ctx context.Context) error { return waitReadyz(ctx, o.Addr) },
		ReadyTimeout: 60 * time.Second,
	}
	p, err := o.Sup.Start(spec)
	if err != nil {
		return nil, fmt.Errorf("start codex: %w", err)
	}
	return &Agent{opts: o, proc: p, token: token}, nil
}

// State is the app-server's supervisor state.
func (a *Agent) State() shared.ProcessState { return a.proc.State() }

// Proc is the supervised process.
func (a *Agent) Proc() *supervisor.Proc { return a.proc }

// Addr is where the app-server listens.
func (a *Agent) Addr() string { return a.opts.Addr }

// WaitReady blocks until Codex answers /readyz (through restarts) or ctx ends.
func (a *Agent) WaitReady(ctx context.Context) error { return a.proc.WaitRunning(ctx) }

// Stop stops the app-server.
func (a *Agent) Stop(ctx context.Context) error { return a.proc.Stop(ctx) }

// waitReadyz polls GET /readyz until it answers 200.
func waitReadyz(ctx context.Context, addr string) error {
	client := &http.Client{Timeout: time.Second}
	url := "http://" + addr + "/readyz"
	delay := 20 * time.Millisecond
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if err != nil && !strings.Contains(err.Error(), "context") {
				return fmt.Errorf("codex /readyz: %w (last: %v)", ctx.Err(), err)
			}
			return fmt.Errorf("codex /readyz: %w", ctx.Err())
		case <-time.After(delay):
		}
		if delay < 200*time.Millisecond {
			delay *= 2
		}
	}
}
