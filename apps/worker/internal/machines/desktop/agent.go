package desktop

import (
	"context"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
	"github.com/open-bot/computer/apps/worker/internal/machines"
)

// noAgentReason is why Codex never runs on a desktop machine (runtime
// "machine"). A vendor's stock desktop has one user and no root between
// it and whatever runs there: an agent in it would need the worker's model
// key where the bot's own shell reads it. Runs there use the worker's own
// loop (runtime "worker", the default on these machines), which drives
// the sandbox through the tools with the key kept in the worker.
const noAgentReason = "Codex does not run on a stock desktop machine (runtime \"machine\"): the model key never enters such a machine; use runtime \"worker\" (the default here), where the agent loop runs in the worker"

// NoAgentReason implements machines.NoAgent: a run on a desktop machine
// is refused before it starts.
func (m *Machine) NoAgentReason() string { return noAgentReason }

var _ machines.NoAgent = (*Machine)(nil)

// DialAgent answers 501 unavailable: no agent runs in the sandbox, and
// nothing is written to it or started there (noAgentReason).
func (m *Machine) DialAgent(ctx context.Context, h codexrpc.Handler) (*codexrpc.Conn, error) {
	return nil, apiErr(501, "unavailable", "%s", noAgentReason)
}
