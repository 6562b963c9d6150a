// Package agent runs Codex's app-server as the bot user under the supervisor
// and keeps its configuration managed: config.toml is rewritten on every
// start so the computer's Codex settings cannot drift.
package agent

import (
	"fmt"
	"strings"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/safefs"
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
` + defaultTables

const defaultTables = `
[features]
memories = false
`

// Provider is the model provider botd manages for Codex (its loopback
// model proxy): ID becomes the default model_provider, TOML its table.
type Provider struct {
	ID   string
	TOML string
}

// WriteConfig writes codexHome/config.toml atomically, owned by bot, 0600.
// prov, when set, is the default model provider; extra (operator-supplied
// TOML) is appended. codexHome is bot's: the file is created relative to its
// fd, O_EXCL|O_NOFOLLOW, and chowned on the fd (safefs).
func WriteConfig(codexHome string, owner osuser.User, prov *Provider, extra string) error {
	// extra follows the [features] table directly (so bare keys in it are
	// features), before the provider's own table.
	if extra != "" {
		extra = "\n# Operator additions (CODEX_CONFIG_EXTRA_FILE)\n" + extra
		if extra[len(extra)-1] != '\n' {
			extra += "\n"
		}
	}
	body := DefaultConfig + extra
	if prov != nil {
		body = strings.TrimSuffix(DefaultConfig, defaultTables) + fmt.Sprintf("model_provider = %q\n", prov.ID) + defaultTables + extra + prov.TOML
	}
	if err := safefs.WriteFile(codexHome, "config.toml", []byte(body), 0o600, int(owner.UID), int(owner.GID)); err != nil {
		return fmt.Errorf("write codex config: %w", err)
	}
	return nil
}
