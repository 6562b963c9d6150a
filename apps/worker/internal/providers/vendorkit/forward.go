package vendorkit

// The forwarder: botd inside a vendor's sandbox is reached through the
// vendor's own routing (E2B's port hosts or E2B_SANDBOX_URL headers and
// traffic token, Daytona's preview URL and token), which the round tripper
// a provider hands NewForwarder adds. Every part of the worker that talks
// to a botd (its typed client, the events and agent websockets, takeover's
// VNC relay, workspace export) does so with a base URL and botd's bearer
// token only, so each reconnected sandbox gets a reverse proxy on
// 127.0.0.1; the worker then sees a botd like any other. The forwarder is
// also where use is seen (for the provider's timeout or activity
// refresher) and where a sandbox that stopped answering is explained
// (the provider's explain says why: paused, stopped, gone).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Forwarder is one sandbox's local entry to its botd.
type Forwarder struct {
	ln  net.Listener
	srv *http.Server
	// lastUse is the unix nanos of the last request that counts as use;
	// upgraded counts open upgraded connections that do.
	lastUse  atomic.Int64
	upgraded atomic.Int64
}

// uses says whether a request to botd is use of the computer: the
// worker's own health probes and its events follower are not.
func uses(r *http.Request) bool {
	switch r.URL.Path {
	case "/health", "/healthz", "/events":
		return false
	}
	return true
}

// NewForwarder listens on 127.0.0.1 and proxies to target through rt.
// explain, when botd does not answer, says why in botd's error envelope
// (known: the sandbox is not running, which explains it).
func NewForwarder(target *url.URL, rt http.RoundTripper, explain func(ctx context.Context) (status int, msg string, known bool)) (*Forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Forwarder{ln: ln}
	f.lastUse.Store(time.Now().UnixNano())
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
		},
		Transport:     rt,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(r.Context().Err(), context.Canceled) {
				return
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
			defer cancel()
			status, msg, _ := explain(ctx)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "unavailable", "message": msg}})
		},
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout {
				// The vendor's proxy could not reach the port (botd
				// never answers these): say why when the sandbox is not
				// running.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(resp.Request.Context()), 10*time.Second)
				defer cancel()
				if status, msg, known := explain(ctx); known {
					_ = resp.Body.Close()
					b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": "unavailable", "message": msg}})
					resp.StatusCode, resp.Status = status, http.StatusText(status)
					resp.Header = http.Header{"Content-Type": {"application/json"}}
					resp.Body = io.NopCloser(bytes.NewReader(b))
					resp.ContentLength = int64(len(b))
				}
				return nil
			}
			if resp.StatusCode == http.StatusSwitchingProtocols && uses(resp.Request) {
				f.upgraded.Add(1)
				if rwc, ok := resp.Body.(interface {
					Read([]byte) (int, error)
					Write([]byte) (int, error)
					Close() error
				}); ok {
					resp.Body = &countedConn{rwc: rwc, done: func() { f.upgraded.Add(-1); f.Touch() }}
				}
			}
			return nil
		},
	}
	f.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if uses(r) {
				f.Touch()
			}
			rp.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 30 * time.Second,
	}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

// Touch records use now; TouchAt records it at t (tests age a forwarder).
func (f *Forwarder) Touch() { f.TouchAt(time.Now()) }

// TouchAt records use at t.
func (f *Forwarder) TouchAt(t time.Time) { f.lastUse.Store(t.UnixNano()) }

// URL is the local base URL of botd.
func (f *Forwarder) URL() string { return "http://" + f.ln.Addr().String() }

// InUse: a connection that counts is open, or one was made within idle.
func (f *Forwarder) InUse(now time.Time, idle time.Duration) bool {
	return f.upgraded.Load() > 0 || now.Sub(time.Unix(0, f.lastUse.Load())) < idle
}

// Close ends the listener and every connection through it (a stopped
// machine answers nothing).
func (f *Forwarder) Close() {
	_ = f.srv.Close()
}

// countedConn is an upgraded connection's body whose Close is counted once.
type countedConn struct {
	rwc interface {
		Read([]byte) (int, error)
		Write([]byte) (int, error)
		Close() error
	}
	once sync.Once
	done func()
}

func (c *countedConn) Read(p []byte) (int, error)  { return c.rwc.Read(p) }
func (c *countedConn) Write(p []byte) (int, error) { return c.rwc.Write(p) }
func (c *countedConn) Close() error {
	c.once.Do(c.done)
	return c.rwc.Close()
}
