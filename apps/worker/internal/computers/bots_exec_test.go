package computers

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// execFunc is a machine's Exec as a func: what the answers were is the
// subject here, not botd.
type execFunc func(context.Context, client.ExecRequest) (client.ExecResult, error)

func (f execFunc) Exec(ctx context.Context, r client.ExecRequest) (client.ExecResult, error) {
	return f(ctx, r)
}

// TestExecIdempotentRetriesOnlyTheWay: AddBot's mkdir/chmod run once more
// when the way to botd failed (CI saw a bare 500 from one such failure on
// a fresh Daytona sandbox), never when botd refused the command or the
// caller gave up.
func TestExecIdempotentRetriesOnlyTheWay(t *testing.T) {
	cases := []struct {
		name  string
		first error
		calls int
	}{
		{"a vendor proxy's 502", &client.Error{Status: http.StatusBadGateway, Code: shared.CodeUnavailable, Message: "nothing answers"}, 2},
		{"botd busy, 503", &client.Error{Status: http.StatusServiceUnavailable, Code: shared.CodeUnavailable, Message: "too many commands"}, 2},
		{"no answer at all", errors.New("vendor forwarder: closed"), 2},
		{"botd refused, 400", &client.Error{Status: http.StatusBadRequest, Code: shared.CodeBadRequest, Message: "cwd is not a directory"}, 1},
		{"botd refused, 401", &client.Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "bad token"}, 1},
		{"the caller gave up", context.Canceled, 1},
		{"it worked", nil, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			m := execFunc(func(ctx context.Context, r client.ExecRequest) (client.ExecResult, error) {
				calls++
				require.Equal(t, []string{"mkdir", "-p", "--", "bots/x"}, r.Argv)
				if calls == 1 {
					return client.ExecResult{}, c.first
				}
				return client.ExecResult{ExitCode: 0}, nil
			})
			_, err := execIdempotent(t.Context(), m, []string{"mkdir", "-p", "--", "bots/x"})
			require.Equal(t, c.calls, calls)
			if c.calls == 2 || c.first == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, c.first)
			}
		})
	}
	// botd's refusal keeps its status and words; a failed way is a 502.
	var ae *shared.APIError
	require.ErrorAs(t, upstreamErr("make bots/x on the computer", &client.Error{Status: 400, Code: shared.CodeBadRequest, Message: "cwd is not a directory"}), &ae)
	require.Equal(t, 400, ae.Status)
	require.Contains(t, ae.Message, "cwd is not a directory")
	require.ErrorAs(t, upstreamErr("make bots/x on the computer", errors.New("dial tcp: refused")), &ae)
	require.Equal(t, http.StatusBadGateway, ae.Status)
}
