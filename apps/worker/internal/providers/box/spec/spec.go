// Package spec holds the Box API as this repository relies on it
// (box-openapi.yaml: written here from the facts in
// ../shared/vendor-specs/README.md, its top comment says which line each
// fact came from and which choices are ours), and Checker, which holds
// every exchange between a client (the adapter) and a server (the
// emulator) to it.
package spec

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
)

// File is box-openapi.yaml.
//
//go:embed box-openapi.yaml
var File []byte

// Base is the API's documented base path.
const Base = "/api/box/v1"

// Validator validates exchanges against box-openapi.yaml.
func Validator() (*vendorkit.Validator, error) {
	return vendorkit.LoadValidator("box-openapi.yaml", File)
}

// Checker is an http.RoundTripper that holds every exchange under Base to
// box-openapi.yaml (route, parameters, bearer credential, bodies, statuses,
// no unnamed property) and checks what a schema cannot say: the key is a
// box_ key, and an error envelope's status is the HTTP status. Traffic
// elsewhere (the desktop page behind its desktopUrl: the box's service, not
// the API) passes unchecked, counted as "desktop". Every violation goes to
// Report; the exchange itself proceeds unchanged.
type Checker struct {
	Base   http.RoundTripper
	V      *vendorkit.Validator
	Report func(error)

	mu   sync.Mutex
	seen []string
}

// NewChecker loads the description.
func NewChecker(base http.RoundTripper, report func(error)) (*Checker, error) {
	v, err := Validator()
	if err != nil {
		return nil, err
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &Checker{Base: base, V: v, Report: report}, nil
}

// Seen lists the exchanges checked, as "kind METHOD path status".
func (c *Checker) Seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// Counts is how many exchanges of each kind were seen ("api",
// "api(error)", "desktop").
func (c *Checker) Counts() map[string]int {
	out := map[string]int{}
	for _, s := range c.Seen() {
		out[strings.Fields(s)[0]]++
	}
	return out
}

func (c *Checker) note(kind string, req *http.Request, status int) {
	c.mu.Lock()
	c.seen = append(c.seen, fmt.Sprintf("%s %s %s %d", kind, req.Method, req.URL.Path, status))
	c.mu.Unlock()
}

func (c *Checker) report(err error) {
	if err != nil && c.Report != nil {
		c.Report(err)
	}
}

func readAll(rc io.ReadCloser) ([]byte, error) {
	if rc == nil || rc == http.NoBody {
		return nil, nil
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// RoundTrip implements http.RoundTripper.
func (c *Checker) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasPrefix(req.URL.Path, Base+"/") && req.URL.Path != Base {
		resp, err := c.Base.RoundTrip(req)
		if err == nil {
			c.note("desktop", req, resp.StatusCode)
		}
		return resp, err
	}
	body, err := readAll(req.Body)
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	if a := req.Header.Get("Authorization"); !strings.HasPrefix(a, "Bearer box_") {
		c.report(fmt.Errorf("box: %s %s: the credential is not Authorization: Bearer box_…", req.Method, req.URL.Path))
	}
	c.report(c.V.ValidateRequest(req, body))
	resp, err := c.Base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	rbody, err := readAll(resp.Body)
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(rbody))
	kind := "api"
	if resp.StatusCode >= 400 {
		kind = "api(error)"
		var e struct {
			Status int `json:"status"`
		}
		if json.Unmarshal(rbody, &e) == nil && e.Status != resp.StatusCode {
			c.report(fmt.Errorf("box: error %d to %s %s: the envelope says status %d", resp.StatusCode, req.Method, req.URL.Path, e.Status))
		}
	}
	c.note(kind, req, resp.StatusCode)
	c.report(c.V.ValidateResponse(req, body, resp.StatusCode, resp.Header, rbody))
	return resp, nil
}
