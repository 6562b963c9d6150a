package desktop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
	"github.com/open-bot/computer/pkg/shared"
)

// agentProbe remembers whether the sandbox has a codex binary.
type agentProbe struct {
	mu    sync.Mutex
	known bool
	path  string
}

func (a *agentProbe) available(ctx context.Context, m *Machine) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.known {
		return a.path != "", nil
	}
	r, err := m.b.Exec(ctx, Cmd{Argv: []string{"sh", "-c", "command -v codex"}, User: m.o.User, Cwd: m.o.Home})
	if err != nil {
		return false, err
	}
	a.known = true
	if r.ExitCode == 0 {
		a.path = strings.TrimSpace(string(r.Stdout))
	}
	return a.path != "", nil
}

// DialAgent starts a fresh `codex app-server` in the sandbox, as the user
// in the workspace, through the backend's streaming process, and speaks
// JSON-RPC to it over its stdin and stdout (codexrpc.NewStream). The
// app-server is the sandbox's: whatever model access it has is what the
// sandbox was given (this machine puts no key there), and it runs in the
// same trust domain as everything else in the sandbox. Without a codex
// binary the answer is 501 unavailable.
func (m *Machine) DialAgent(ctx context.Context, h codexrpc.Handler) (*codexrpc.Conn, error) {
	ok, err := m.agent.available(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("desktop machine: agent: %w", err)
	}
	if !ok {
		return nil, apiErr(http.StatusNotImplemented, shared.CodeUnavailable,
			"this sandbox has no codex binary, so no agent runs on it; shell, file and screen tools still work")
	}
	if err := m.ensureWorkspace(ctx); err != nil {
		return nil, err
	}
	// The process outlives ctx (the dial's): it ends when the Conn closes.
	p, err := m.b.Start(context.WithoutCancel(ctx), Cmd{Argv: []string{"codex", "app-server"}, User: m.o.User, Cwd: m.o.Workspace,
		Env: map[string]string{"HOME": m.o.Home}})
	if err != nil {
		return nil, fmt.Errorf("desktop machine: start codex app-server: %w", err)
	}
	return codexrpc.NewStream(&procRWC{p: p}, h), nil
}

// procRWC is a started process as one io.ReadWriteCloser.
type procRWC struct {
	p    Process
	once sync.Once
}

func (r *procRWC) Read(b []byte) (int, error) { return r.p.Stdout().Read(b) }

func (r *procRWC) Write(b []byte) (int, error) { return r.p.Stdin().Write(b) }

func (r *procRWC) Close() error {
	var err error
	r.once.Do(func() {
		_ = r.p.Stdin().Close()
		err = r.p.Close()
		if errors.Is(err, io.EOF) {
			err = nil
		}
	})
	return err
}
