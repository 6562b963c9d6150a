package e2b

// The forwarder: botd inside a sandbox is reached through the vendor's port
// routing ({port}-{id}.{domain}, or E2B_SANDBOX_URL with the
// E2b-Sandbox-Id/E2b-Sandbox-Port headers) and its traffic token. Every part
// of the worker that talks to a botd (its typed client, the events and
// agent websockets, takeover's VNC relay, workspace export) does so with a
// base URL, an HTTP client and botd's bearer token, so each reconnected
// sandbox gets an in-process forwarder (an http.RoundTripper, no listener)
// that adds what the vendor's routing needs; the worker then sees a botd
// like any other. The forwarder is also where
// use is seen (for the timeout refresher) and where a sandbox that stopped
// answering is explained (its timeout lapsed, or it is gone).

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
)

// forwarder is one sandbox's local entry to its botd (vendorkit.Forwarder).
type forwarder struct{ *vendorkit.Forwarder }

func newForwarder(target *url.URL, rt http.RoundTripper, explain func(ctx context.Context) (status int, msg string, known bool)) *forwarder {
	return &forwarder{vendorkit.NewForwarder(target, rt, explain)}
}

func (f *forwarder) touch()                                       { f.Touch() }
func (f *forwarder) inUse(now time.Time, idle time.Duration) bool { return f.InUse(now, idle) }
func (f *forwarder) close()                                       { f.Close() }

// botdTarget is where botd is reached: E2B_SANDBOX_URL (the headers name the
// sandbox and port), else https://{port}-{id}.{domain}.
func sandboxTarget(sandboxURL, scheme, domain, id string, port int) (*url.URL, bool, error) {
	if sandboxURL != "" {
		u, err := url.Parse(strings.TrimRight(sandboxURL, "/"))
		return u, true, err
	}
	u, err := url.Parse(scheme + "://" + itoa(port) + "-" + id + "." + domain)
	return u, false, err
}
