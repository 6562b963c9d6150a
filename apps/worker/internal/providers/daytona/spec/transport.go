package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"regexp"
	"strings"
	"sync"
)

// Checker is an http.RoundTripper that holds every exchange to Daytona's
// published API: the API's routes against api-openapi.yaml (the toolbox's
// routes under /toolbox/{sandboxId}/toolbox/… included), and the toolbox
// proxy's ({ToolboxPrefix}{sandboxId}/…) against toolbox-openapi.yaml.
// Preview traffic (PreviewPrefix: a sandbox's own ports, botd, noVNC) is
// passed through unchecked: it is the sandbox's service, not the vendor's
// API.
//
// Two things the descriptions leave out are checked against what the
// vendor's SDK and services do, and named so in Seen:
//   - error answers: the API publishes only its successes, so a 4xx/5xx an
//     operation does not list must be the API's error envelope
//     {statusCode, message[, code, error, timestamp, path, method]} (no
//     other property; statusCode equal to the status; a message) — the
//     fields the SDK reads (errors/DaytonaError.js: message, code, error);
//   - the body of POST /files/bulk-upload, which the toolbox's description
//     does not publish: multipart parts files[i].path and files[i].file
//     only (what the SDK's FileSystem.uploadFiles sends).
//
// Every violation goes to Report (a test passes t.Errorf); the exchange
// itself proceeds unchanged.
type Checker struct {
	Base    http.RoundTripper
	API     *Validator
	Toolbox *Validator
	Report  func(error)
	// ToolboxPrefix is the path of the toolbox proxy in front of the
	// sandbox ID (toolboxProxyUrl's path + "/"): "/toolbox/".
	ToolboxPrefix string
	// PreviewPrefix is the path under which preview URLs reach sandbox
	// ports ("" when previews are told by host only).
	PreviewPrefix string

	mu   sync.Mutex
	seen []string
}

// NewChecker loads both descriptions; the prefixes are the emulator's.
func NewChecker(base http.RoundTripper, report func(error)) (*Checker, error) {
	a, err := API()
	if err != nil {
		return nil, err
	}
	tb, err := Toolbox()
	if err != nil {
		return nil, err
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &Checker{Base: base, API: a, Toolbox: tb, Report: report, ToolboxPrefix: "/toolbox/", PreviewPrefix: "/preview/"}, nil
}

// Seen lists the exchanges checked, as "kind METHOD path status".
func (c *Checker) Seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
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

// RoundTrip implements http.RoundTripper.
func (c *Checker) RoundTrip(req *http.Request) (*http.Response, error) {
	p := req.URL.Path
	switch {
	case c.PreviewPrefix != "" && strings.HasPrefix(p, c.PreviewPrefix):
		resp, err := c.Base.RoundTrip(req)
		if err == nil {
			c.note("preview", req, resp.StatusCode)
		}
		return resp, err
	case strings.HasPrefix(p, c.ToolboxPrefix):
		rest := strings.TrimPrefix(p, c.ToolboxPrefix)
		_, tail, _ := strings.Cut(rest, "/")
		if strings.HasPrefix(tail, "toolbox/") {
			// The API's own toolbox routes (/toolbox/{id}/toolbox/…).
			return c.openapi("api", c.API, req, "")
		}
		return c.openapi("toolbox", c.Toolbox, req, "/"+tail)
	default:
		return c.openapi("api", c.API, req, "")
	}
}

func readAll(rc io.ReadCloser) ([]byte, error) {
	if rc == nil || rc == http.NoBody {
		return nil, nil
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// openapi checks one exchange against v; asPath, when set, is the path the
// description publishes the route under (the toolbox proxy's prefix and
// sandbox ID taken off).
func (c *Checker) openapi(kind string, v *Validator, req *http.Request, asPath string) (*http.Response, error) {
	body, err := readAll(req.Body)
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	checked := req
	if asPath != "" {
		checked = req.Clone(req.Context())
		checked.URL.Path, checked.URL.RawPath = asPath, ""
	}
	checkedBody := body
	if route, _, err := v.Route(checked); err == nil && route.Operation.RequestBody == nil && len(body) > 0 && route.Operation.OperationID == "UploadFiles" {
		// The description publishes no body for bulk-upload: its
		// multipart shape is checked here, the rest as published.
		c.report(bulkUpload(req.Header.Get("Content-Type"), body))
		kind += "(bulk-upload-body)"
		checked = checked.Clone(checked.Context())
		checked.Header.Del("Content-Type")
		checkedBody = nil
	}
	c.report(v.ValidateRequest(checked, checkedBody))
	resp, err := c.Base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	rbody, err := readAll(resp.Body)
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(rbody))
	if route, _, err := v.Route(checked); err == nil && resp.StatusCode >= 400 && route.Operation.Responses.Status(resp.StatusCode) == nil {
		c.note(kind+"(error)", req, resp.StatusCode)
		c.report(errorEnvelope(kind, req, resp, rbody))
		return resp, nil
	}
	if route, _, err := v.Route(checked); err == nil && route.Operation.OperationID == "DownloadFiles" && resp.StatusCode == http.StatusOK {
		// Its published schema (gin.H, an object of objects) cannot hold
		// file parts; the description's own words are checked instead:
		// parts named file, or error with a JSON message, each named by
		// the path it is for.
		c.note(kind+"(bulk-download-answer)", req, resp.StatusCode)
		c.report(bulkDownload(resp.Header.Get("Content-Type"), rbody))
		return resp, nil
	}
	c.note(kind, req, resp.StatusCode)
	c.report(v.ValidateResponse(checked, checkedBody, resp.StatusCode, resp.Header, rbody))
	return resp, nil
}

// bulkDownload checks a bulk-download answer.
func bulkDownload(contentType string, body []byte) error {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return fmt.Errorf("toolbox: POST /files/bulk-download: answer content type %q, want multipart/form-data", contentType)
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for n := 0; ; n++ {
		part, err := mr.NextPart()
		if err == io.EOF {
			if n == 0 {
				return fmt.Errorf("toolbox: POST /files/bulk-download: an answer with no part")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("toolbox: POST /files/bulk-download: %w", err)
		}
		if part.FileName() == "" {
			return fmt.Errorf("toolbox: POST /files/bulk-download: part %q names no file", part.FormName())
		}
		switch part.FormName() {
		case "file":
		case "error":
			var e struct {
				Message string `json:"message"`
			}
			b, _ := io.ReadAll(part)
			if json.Unmarshal(b, &e) != nil || e.Message == "" {
				return fmt.Errorf("toolbox: POST /files/bulk-download: error part for %q is not JSON with a message", part.FileName())
			}
		default:
			return fmt.Errorf("toolbox: POST /files/bulk-download: part %q (want file or error)", part.FormName())
		}
	}
}

// ErrorBody is the API's (and the toolbox's) error envelope, as the SDK
// reads it.
type ErrorBody struct {
	StatusCode int    `json:"statusCode"`
	Message    string `json:"message"`
	Code       string `json:"code,omitempty"`
	Error      string `json:"error,omitempty"`
	Timestamp  string `json:"timestamp,omitempty"`
	Path       string `json:"path,omitempty"`
	Method     string `json:"method,omitempty"`
}

func errorEnvelope(kind string, req *http.Request, resp *http.Response, body []byte) error {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/json" {
		return fmt.Errorf("%s: error %d to %s %s: content type %q, not the JSON error envelope", kind, resp.StatusCode, req.Method, req.URL.Path, mt)
	}
	var e ErrorBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return fmt.Errorf("%s: error %d to %s %s: not the error envelope: %w", kind, resp.StatusCode, req.Method, req.URL.Path, err)
	}
	if e.StatusCode != resp.StatusCode || e.Message == "" {
		return fmt.Errorf("%s: error %d to %s %s: envelope statusCode %d, message %q", kind, resp.StatusCode, req.Method, req.URL.Path, e.StatusCode, e.Message)
	}
	return nil
}

var bulkPart = regexp.MustCompile(`^files\[(\d+)\]\.(path|file)$`)

// bulkUpload checks a bulk-upload body: multipart parts files[i].path and
// files[i].file, each index with both.
func bulkUpload(contentType string, body []byte) error {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return fmt.Errorf("toolbox: POST /files/bulk-upload: content type %q, want multipart/form-data", contentType)
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	have := map[string]map[string]bool{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("toolbox: POST /files/bulk-upload: %w", err)
		}
		m := bulkPart.FindStringSubmatch(part.FormName())
		if m == nil {
			return fmt.Errorf("toolbox: POST /files/bulk-upload: part %q (want files[i].path and files[i].file)", part.FormName())
		}
		if have[m[1]] == nil {
			have[m[1]] = map[string]bool{}
		}
		have[m[1]][m[2]] = true
	}
	if len(have) == 0 {
		return fmt.Errorf("toolbox: POST /files/bulk-upload: no files")
	}
	for i, h := range have {
		if !h["path"] || !h["file"] {
			return fmt.Errorf("toolbox: POST /files/bulk-upload: files[%s] lacks its path or file", i)
		}
	}
	return nil
}
