package desktop

import (
	"context"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
	"github.com/open-bot/computer/apps/worker/internal/machines"
)

// noAgentReason is why no agent runs on a desktop machine. A vendor's
// stock desktop has one user and no root between it and whatever runs
// there: an agent in it would need the worker's model key where the bot's
// own shell reads it. The agent loop for such machines (the agent in the
// worker, driving the sandbox through the tools) is not built yet.
const noAgentReason = "no agent runs on a stock desktop machine: the agent loop for these machines (run in the worker) is not built yet, and the model key never enters such a machine; shell, file and screen tools work"

// NoAgentReason implements machines.NoAgent: a run on a desktop machine
// is refused before it starts.
func (m *Machine) NoAgentReason() string { return noAgentReason }

var _ machines.NoAgent = (*Machine)(nil)

// DialAgent answers 501 unavailable: no agent runs in the sandbox, and
// nothing is written to it or started there (noAgentReason).
func (m *Machine) DialAgent(ctx context.Context, h codexrpc.Handler) (*codexrpc.Conn, error) {
	return nil, apiErr(501, "unavailable", "%s", noAgentReason)
}
