package computers

import (
	"context"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/tools"
)

// InstrumentTools sets sess's Observe (the metrics) and Trace (the
// traces) for tool calls on computer id of provider kind provider; each
// stays nil when that is off. provider "" is read from the store, once
// and only when either is on ("unknown" when it cannot be).
func (s *Service) InstrumentTools(ctx context.Context, sess *tools.Session, id, provider string) {
	m, t := s.o.Metrics, s.o.Tracing
	if m == nil && t == nil {
		return
	}
	if provider == "" {
		provider = "unknown"
		if c, err := s.o.Store.GetComputer(ctx, id); err == nil {
			provider = c.Provider
		}
	}
	if m != nil {
		sess.Observe = func(tool string, ok bool, d time.Duration) { m.ToolCall(tool, provider, ok, d) }
	}
	if t != nil {
		sess.Trace = func(ctx context.Context, tool string) (context.Context, func(bool, string)) {
			return t.Tool(ctx, tool, provider, id)
		}
	}
}

// MetricsSource is what a metrics scrape reads of this service: the
// store's computers and live runs, and the warm pool.
func (s *Service) MetricsSource() MetricsSource { return MetricsSource{s: s} }

// MetricsSource implements metrics.Source.
type MetricsSource struct{ s *Service }

// Computers counts the store's computers by provider and observed state,
// destroyed ones left out.
func (ms MetricsSource) Computers(ctx context.Context) (map[[2]string]int, error) {
	cs, err := ms.s.o.Store.ListComputers(ctx)
	if err != nil {
		return nil, err
	}
	out := map[[2]string]int{}
	for _, c := range cs {
		if c.ObservedState == store.StateDestroyed {
			continue
		}
		out[[2]string{c.Provider, c.ObservedState}]++
	}
	return out, nil
}

// LiveRuns counts the store's runs in each live state (zero included).
func (ms MetricsSource) LiveRuns(ctx context.Context) (map[string]int, error) {
	live := []string{store.RunQueued, store.RunRunning, store.RunWaitingTakeover}
	rs, err := ms.s.o.Store.ListRuns(ctx, "", live...)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, st := range live {
		out[st] = 0
	}
	for _, r := range rs {
		out[r.State]++
	}
	return out, nil
}

// PoolReady counts the warm pool's ready machines by kind.
func (ms MetricsSource) PoolReady() map[string]int {
	out := map[string]int{}
	for _, k := range ms.s.Pool() {
		out[k.Provider] = len(k.Ready)
	}
	return out
}
