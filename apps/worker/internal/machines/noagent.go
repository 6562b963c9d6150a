package machines

import (
	"net/http"

	"github.com/open-bot/computer/pkg/shared"
)

// NoAgent is what a machine on which no agent may run answers besides
// Machine: why, in a sentence for the caller. Its DialAgent refuses too;
// NoAgentOf lets a run be refused before anything is started or held.
type NoAgent interface {
	NoAgentReason() string
}

// NoAgentOf is 501 unavailable with m's reason when no agent may run on
// m, nil otherwise.
func NoAgentOf(m Machine) error {
	if n, ok := m.(NoAgent); ok {
		return shared.Errorf(http.StatusNotImplemented, shared.CodeUnavailable, "%s", n.NoAgentReason())
	}
	if u, ok := m.(interface{ Unwrap() Machine }); ok {
		return NoAgentOf(u.Unwrap())
	}
	return nil
}
