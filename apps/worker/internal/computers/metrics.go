package computers

import (
	"context"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/store"
)

// ToolObserver is the metrics' observer of tool calls on a computer of
// provider kind provider: nil without metrics.
func (s *Service) ToolObserver(provider string) func(tool string, ok bool, d time.Duration) {
	m := s.o.Metrics
	if m == nil {
		return nil
	}
	return func(tool string, ok bool, d time.Duration) { m.ToolCall(tool, provider, ok, d) }
}

// ToolObserverOf is ToolObserver for computer id, for a caller without its
// row at hand (its provider read once, now; "unknown" when it cannot be).
func (s *Service) ToolObserverOf(ctx context.Context, id string) func(tool string, ok bool, d time.Duration) {
	if s.o.Metrics == nil {
		return nil
	}
	provider := "unknown"
	if c, err := s.o.Store.GetComputer(ctx, id); err == nil {
		provider = c.Provider
	}
	return s.ToolObserver(provider)
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

// ToolTracer starts the span of each tool call on computer id (of
// provider kind provider), for tools.Session.Trace: nil without tracing.
func (s *Service) ToolTracer(provider, id string) func(ctx context.Context, tool string) (context.Context, func(ok bool, code string)) {
	t := s.o.Tracing
	if t == nil {
		return nil
	}
	return func(ctx context.Context, tool string) (context.Context, func(bool, string)) {
		return t.Tool(ctx, tool, provider, id)
	}
}

// ToolTracerOf is ToolTracer for a caller without the computer's row at
// hand (its provider read once, now; "unknown" when it cannot be).
func (s *Service) ToolTracerOf(ctx context.Context, id string) func(ctx context.Context, tool string) (context.Context, func(ok bool, code string)) {
	if s.o.Tracing == nil {
		return nil
	}
	provider := "unknown"
	if c, err := s.o.Store.GetComputer(ctx, id); err == nil {
		provider = c.Provider
	}
	return s.ToolTracer(provider, id)
}
