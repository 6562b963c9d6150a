package desktop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
// JSON-RPC to it over its stdin and stdout (codexrpc.NewStream). With
// Options.Model the app-server reaches that model (writeAgentConfig);
// without, whatever model access the sandbox has is what it gets. It runs
// in the same trust domain as everything else in the sandbox. Without a
// codex binary the answer is 501 unavailable.
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
	cmd := Cmd{Argv: []string{"codex", "app-server"}, User: m.o.User, Cwd: m.o.Workspace, Env: map[string]string{"HOME": m.o.Home}}
	if m.o.Model != nil {
		if err := m.writeAgentConfig(ctx); err != nil {
			return nil, fmt.Errorf("desktop machine: agent: %w", err)
		}
		// The key goes from its file into codex's environment inside the
		// sandbox: the command line names the file only.
		cmd.Argv = []string{"sh", "-c", agentTokenEnv + `="$(cat "$1")" || exit 1; export ` + agentTokenEnv + `; exec codex app-server`, "sh", m.agentDir() + "/model_api_key"}
		cmd.Env["CODEX_HOME"] = m.agentDir() + "/codex"
	}
	// The process outlives ctx (the dial's): it ends when the Conn closes.
	p, err := m.b.Start(context.WithoutCancel(ctx), cmd)
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

// Model is what the sandbox's agent reaches: an OpenAI-compatible
// Responses API (the worker's MODEL_UPSTREAM_URL) and its key.
type Model struct {
	BaseURL string
	Key     string
}

// AgentProviderID is the Codex model provider the machine's config
// defines: botd's id for its model proxy, so a worker's
// WORKER_MODEL_PROVIDER=botd selects the model on either kind of machine.
const AgentProviderID = "botd"

// agentTokenEnv is the variable codex reads the key from (the provider
// table's env_key), botd's name for its per-boot token.
const agentTokenEnv = "OPEN_BOT_MODEL_TOKEN"

// agentDir holds the agent's key and CODEX_HOME: the user's, 0700, outside
// the workspace (so no checkpoint carries the key).
func (m *Machine) agentDir() string { return strings.TrimRight(m.o.Home, "/") + "/.open-bot-agent" }

// agentConfig is the Codex configuration the machine manages (rewritten on
// every dial): the model provider and botd's defaults; the worker sets the
// model, approvals and sandbox per thread and turn.
func agentConfig(baseURL string) string {
	return fmt.Sprintf(`# Managed by the open-bot worker (desktop machine). Rewritten on every agent start.
model_provider = %q
sandbox_mode = "danger-full-access"
approval_policy = "never"

[features]
memories = false

[model_providers.%s]
name = "open-bot model"
base_url = %q
wire_api = "responses"
env_key = %q
`, AgentProviderID, AgentProviderID, baseURL, agentTokenEnv)
}

// writeAgentConfig writes the agent's key and config.toml into agentDir:
// the key through the command's stdin (never an argument), both files
// made under umask 077 in a 0700 directory, so only the sandbox's user can
// read them.
func (m *Machine) writeAgentConfig(ctx context.Context) error {
	base := m.o.Model.BaseURL
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(base, "\"\n\r\\") {
		return errors.New("the model's base URL must be an http(s) URL")
	}
	if m.o.Model.Key == "" {
		return errors.New("the model's key is empty")
	}
	const script = `set -e
umask 077
mkdir -p "$1/codex"
chmod 0700 "$1" "$1/codex"
cat >"$1/model_api_key.new"
mv -f "$1/model_api_key.new" "$1/model_api_key"
printf '%s' "$2" >"$1/codex/config.toml.new"
mv -f "$1/codex/config.toml.new" "$1/codex/config.toml"`
	r, err := m.b.Exec(ctx, Cmd{Argv: []string{"sh", "-c", script, "sh", m.agentDir(), agentConfig(base)}, User: m.o.User,
		Stdin: strings.NewReader(m.o.Model.Key), MaxOutput: 4 << 10})
	if err != nil {
		return err
	}
	if r.ExitCode != 0 {
		return fmt.Errorf("write the agent's config: exit %d: %s", r.ExitCode, firstLine(r.Stderr))
	}
	return nil
}
