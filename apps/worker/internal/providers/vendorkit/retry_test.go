package vendorkit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type statusErr int

func (e statusErr) Error() string { return "status " + time.Duration(e).String() }

func statusOf(err error) (int, bool) {
	var se statusErr
	if errors.As(err, &se) {
		return int(se), true
	}
	return 0, false
}

// TestRetryPolicy: what is sent again and what is not, for a call that may
// have made something (a create) and one that may not.
func TestRetryPolicy(t *testing.T) {
	var waits []time.Duration
	p := Retry{Retries: 3, Backoff: 8 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Sleep: func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }}
	run := func(idempotent bool, answers ...error) (int, error) {
		calls := 0
		_, err := p.Do(context.Background(), "vendor: op", idempotent, statusOf, func() (int, time.Duration, error) {
			e := answers[min(calls, len(answers)-1)]
			calls++
			if e != nil {
				if st, ok := statusOf(e); ok {
					return st, 0, e
				}
			}
			return 200, 0, e
		})
		return calls, err
	}
	for _, c := range []struct {
		name       string
		idempotent bool
		answers    []error
		calls      int
		ok         bool
	}{
		{"429 then success, a create", false, []error{statusErr(429), nil}, 2, true},
		{"503 then success, a create", false, []error{statusErr(503), nil}, 2, true},
		{"500 on a create is not sent again", false, []error{statusErr(500), nil}, 1, false},
		{"no answer on a create is not sent again", false, []error{errors.New("refused"), nil}, 1, false},
		{"500 then success, idempotent", true, []error{statusErr(500), nil}, 2, true},
		{"no answer then success, idempotent", true, []error{errors.New("refused"), nil}, 2, true},
		{"404 is final", true, []error{statusErr(404), nil}, 1, false},
		{"502 forever gives up", true, []error{statusErr(502)}, 4, false},
	} {
		calls, err := run(c.idempotent, c.answers...)
		require.Equal(t, c.calls, calls, c.name)
		require.Equal(t, c.ok, err == nil, c.name)
		if c.calls == 4 {
			require.True(t, strings.Contains(err.Error(), "gave up after 4 attempts"), err.Error())
		}
	}
	for _, d := range waits {
		require.LessOrEqual(t, d, 20*time.Millisecond, "a wait is capped at MaxBackoff")
	}
	// A wait cut short by the caller's context ends the call with its error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.Sleep = SleepCtx
	_, err := p.Do(ctx, "vendor: op", true, statusOf, func() (int, time.Duration, error) { return 503, 0, statusErr(503) })
	require.Error(t, err)
}
