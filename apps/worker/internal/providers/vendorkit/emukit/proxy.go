package emukit

import (
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// CheckedProxy is a reverse proxy to target whose every exchange goes
// through check (a vendor spec Checker): what a test hands a worker in
// place of the emulator's own URL, so that the worker's traffic is held to
// the vendor's published API as the conformance suites hold an adapter's.
// Headers pass unchanged (no X-Forwarded-*), streams are flushed as they
// come, and upgrades (websockets) pass through when check hands back the
// transport's own answer (what the Checkers do for traffic they do not
// check).
func CheckedProxy(target *url.URL, check http.RoundTripper) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     check,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
}
