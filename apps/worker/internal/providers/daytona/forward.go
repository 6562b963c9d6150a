package daytona

// The forwarder: botd inside a sandbox is reached through the sandbox's
// preview URL for port 7000 and its token (the X-Daytona-Preview-Token
// header). Every part of the worker that talks to a botd (its typed
// client, the events and agent websockets, takeover's VNC relay, workspace
// export) does so with a base URL, an HTTP client and botd's bearer token,
// so each reconnected sandbox gets an in-process forwarder (an
// http.RoundTripper, no listener) that adds what the vendor's proxy needs;
// the worker then sees a botd like any other. The
// forwarder is also where use is seen (for the activity refresher that
// keeps auto-stop from stopping a computer in use) and where a sandbox that
// stopped answering is explained (stopped, archived, in error, or gone).

import (
	"context"
	"net/http"
	"net/url"
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

// previewHeaders adds a preview's token (and skips the vendor's browser
// warning page, which only browsers get) to every request through it.
type previewHeaders struct {
	next  http.RoundTripper
	token string
}

// PreviewTokenHeader carries a private sandbox's preview token.
const PreviewTokenHeader = "X-Daytona-Preview-Token"

func (p *previewHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if p.token != "" {
		r.Header.Set(PreviewTokenHeader, p.token)
	}
	r.Header.Set("X-Daytona-Skip-Preview-Warning", "true")
	return p.next.RoundTrip(r)
}
