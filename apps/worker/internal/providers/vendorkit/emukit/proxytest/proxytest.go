// Package proxytest puts a vendor's spec Checker between a worker under
// test and an emulator, for the e2b, daytona and box emutest packages.
package proxytest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emukit"
)

// Checker is a vendor's spec checker: a round tripper that validates each
// exchange and lists what it saw ("<kind> <method> <path>" each).
type Checker interface {
	http.RoundTripper
	Seen() []string
}

// Serve starts a reverse proxy on 127.0.0.1 to target whose every exchange
// c holds to the vendor's spec, and returns its URL. When the test ends
// (after the cleanups registered later, the worker's among them) it logs
// the exchanges checked per kind and fails the test if violations() is not
// zero or no exchange of kind mustSee went through it (a worker that
// skipped the proxy).
func Serve(t testing.TB, vendor, target string, c Checker, violations func() int64, mustSee string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := httptest.NewServer(emukit.CheckedProxy(u, c))
	t.Cleanup(func() {
		p.Close()
		counts := map[string]int{}
		for _, e := range c.Seen() {
			counts[strings.Fields(e)[0]]++
		}
		kinds := make([]string, 0, len(counts))
		for k := range counts {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		var b strings.Builder
		for _, k := range kinds {
			fmt.Fprintf(&b, " %s=%d", k, counts[k])
		}
		n := violations()
		t.Logf("%s spec checker between the worker and the emulator: exchanges checked:%s; violations: %d", vendor, b.String(), n)
		if n > 0 {
			t.Errorf("%d spec violation(s) on the worker's path to the %s emulator (SPEC VIOLATION lines above)", n, vendor)
		}
		if counts[mustSee] == 0 {
			t.Errorf("no %s exchange passed the spec checker: the worker did not go through it", mustSee)
		}
	})
	return p.URL
}
