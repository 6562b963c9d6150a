package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/osuser"
	"github.com/open-bot/computer/apps/botd/internal/runner"
)

// SandboxProbe is the outcome of the start-up test of Chromium's sandbox.
type SandboxProbe struct {
	// OK is true when user, PID and network namespaces work for the desktop
	// user, so Chromium can sandbox its renderers.
	OK bool
	// Detail says why not (the probe's output or error), for the log.
	Detail string
}

// NoSandbox reports whether browsers must start with --no-sandbox.
func (p SandboxProbe) NoSandbox() bool { return !p.OK }

// ProbeSandbox runs `unshare --user --pid --net true` as u. When it fails,
// every browser starts with --no-sandbox and a warning is logged. The
// result is meant to be kept for botd's lifetime.
func ProbeSandbox(ctx context.Context, r runner.Runner, u *osuser.User, log zerolog.Logger) SandboxProbe {
	if r == nil {
		r = runner.Exec{}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	p, err := r.Start(runner.Spec{Argv: []string{"unshare", "--user", "--pid", "--net", "true"}, User: u, Stdout: &out, Stderr: &out})
	res := SandboxProbe{}
	if err != nil {
		res.Detail = err.Error()
	} else {
		type waited struct {
			code int
			err  error
		}
		wc := make(chan waited, 1)
		go func() { c, e := p.Wait(); wc <- waited{c, e} }()
		select {
		case w := <-wc:
			switch {
			case w.err != nil:
				res.Detail = w.err.Error()
			case w.code != 0:
				res.Detail = fmt.Sprintf("exit status %d: %s", w.code, strings.TrimSpace(out.String()))
			default:
				res.OK = true
			}
		case <-ctx.Done():
			_ = p.SignalGroup(syscall.SIGKILL)
			<-wc
			res.Detail = errors.New("timed out").Error()
		}
	}
	if res.OK {
		log.Info().Str("component", "browser").Msg("chromium sandbox available (user namespaces work)")
	} else {
		log.Warn().Str("component", "browser").Str("detail", res.Detail).Msg("chromium sandbox unavailable: browsers start with --no-sandbox")
	}
	return res
}
