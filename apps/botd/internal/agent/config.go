// Package agent runs Codex's app-server as the bot user under the supervisor
// and keeps its configuration managed: config.toml is rewritten on every
// start so the computer's Codex settings cannot drift.
package agent

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
)

// ManagedHeader is the first line of the config botd writes.
const ManagedHeader = "# Managed by botd. Edits are overwritten on start."

// DefaultConfig is the seed's Codex configuration. These are defaults only:
// the worker sets model, approval policy and sandbox per thread and turn.
// Codex's own sandbox is off because the computer is the boundary.
const DefaultConfig = ManagedHeader + `
model = "gpt-6.1-sol"
model_reasoning_effort = "medium"
sandbox_mode = "danger-full-access"
approval_policy = "never"

[features]
memories = false
`

// WriteConfig writes codexHome/config.toml atomically, owned by bot, 0600.
// extra (operator-supplied TOML, e.g. a model provider table) is appended.
func WriteConfig(codexHome string, owner osuser.User, extra string) error {
	body := DefaultConfig
	if extra != "" {
		body += "\n# Operator additions (CODEX_CONFIG_EXTRA_FILE)\n" + extra
		if body[len(body)-1] != '\n' {
			body += "\n"
		}
	}
	tmp, err := os.CreateTemp(codexHome, ".config.toml-*")
	if err != nil {
		return fmt.Errorf("write codex config: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(body); err != nil {
		tmp.Close()
		return fmt.Errorf("write codex config: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write codex config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write codex config: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return fmt.Errorf("write codex config: %w", err)
	}
	if err := os.Chown(tmp.Name(), int(owner.UID), int(owner.GID)); err != nil {
		return fmt.Errorf("write codex config: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(codexHome, "config.toml")); err != nil {
		return fmt.Errorf("write codex config: %w", err)
	}
	return nil
}
