package spec

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// The generated envd services, registered for RPC checks.
	_ "github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/filesystem"
	_ "github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/process"
)

// EnvdPort is envd's port in a sandbox.
const EnvdPort = "49983"

// Checker is an http.RoundTripper that holds every exchange to E2B's
// published API: control-plane traffic against openapi.yml, envd's HTTP
// against envd.yaml, and envd's Connect-RPC (JSON codec, connect+json
// stream envelopes) against the generated protobuf types, decoded strictly
// (a field the .proto does not have is an error). Sandbox traffic is told by
// the Host `{port}-{sandboxID}.…` or the E2b-Sandbox-Id/E2b-Sandbox-Port
// headers; ports other than envd's are passed through unchecked (they are
// the sandbox's own services, not the vendor's API).
//
// Every violation goes to Report (a test passes t.Errorf); the exchange
// itself proceeds unchanged, streams included.
type Checker struct {
	Base         http.RoundTripper
	ControlPlane *Validator
	Envd         *Validator
	Report       func(error)

	// Aliases lets routes the description does not publish through, checked
	// as the published route they stand for (request fields the published
	// one lacks are allowed; the answer is held to it in full). Nil: none.
	Aliases []Alias

	mu   sync.Mutex
	seen []string
}

// Alias maps an unpublished route to the published one it is checked as.
type Alias struct {
	Method string
	// Pattern matches the path; its submatches replace $1… in As.
	Pattern *regexp.Regexp
	As      string
	// Why says where the route is used.
	Why string
}

// SDKAliases are the control-plane routes the JS SDK 2.x (e2b@2.51.0) uses
// that the published openapi.yml (b802997) does not have yet: it creates
// through POST /v2/sandboxes and connects through POST
// /v2/sandboxes/{id}/connect (body {timeout?, memory?}).
var SDKAliases = []Alias{
	{Method: http.MethodPost, Pattern: regexp.MustCompile(`^/v2/sandboxes$`), As: "/sandboxes", Why: "e2b JS SDK 2.x Sandbox.create"},
	{Method: http.MethodPost, Pattern: regexp.MustCompile(`^/v2/sandboxes/([^/]+)/connect$`), As: "/sandboxes/$1/connect", Why: "e2b JS SDK 2.x Sandbox.connect"},
}

// NewChecker loads both descriptions.
func NewChecker(base http.RoundTripper, report func(error)) (*Checker, error) {
	cp, err := ControlPlane()
	if err != nil {
		return nil, err
	}
	ev, err := Envd()
	if err != nil {
		return nil, err
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &Checker{Base: base, ControlPlane: cp, Envd: ev, Report: report}, nil
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

var sandboxHost = regexp.MustCompile(`^(\d+)-[^.]+\.`)

// port is the sandbox port a request is for, "" for the control plane.
func port(req *http.Request) string {
	if req.Header.Get("E2b-Sandbox-Id") != "" {
		if p := req.Header.Get("E2b-Sandbox-Port"); p != "" {
			return p
		}
		return EnvdPort
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if m := sandboxHost.FindStringSubmatch(host); m != nil {
		return m[1]
	}
	return ""
}

// RoundTrip checks one exchange.
func (c *Checker) RoundTrip(req *http.Request) (*http.Response, error) {
	p := port(req)
	switch {
	case p == "":
		return c.openapi("control-plane", c.ControlPlane, req)
	case p != EnvdPort:
		return c.Base.RoundTrip(req)
	case strings.HasPrefix(req.URL.Path, "/process.Process/") || strings.HasPrefix(req.URL.Path, "/filesystem.Filesystem/"):
		return c.rpc(req)
	default:
		return c.openapi("envd", c.Envd, req)
	}
}

func readAll(rc io.ReadCloser) ([]byte, error) {
	if rc == nil || rc == http.NoBody {
		return nil, nil
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func (c *Checker) openapi(kind string, v *Validator, req *http.Request) (*http.Response, error) {
	body, err := readAll(req.Body)
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	checked := req // what is checked: req, or the published route it stands for
	aliased := false
	for _, a := range c.Aliases {
		if a.Method == req.Method && a.Pattern.MatchString(req.URL.Path) {
			checked = req.Clone(req.Context())
			checked.URL.Path = a.Pattern.ReplaceAllString(req.URL.Path, a.As)
			checked.URL.RawPath = ""
			aliased = true
			kind += "(alias)"
			break
		}
	}
	if aliased {
		c.report(v.ValidateRequestLoose(checked, body))
	} else {
		c.report(v.ValidateRequest(checked, body))
	}
	resp, err := c.Base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	rbody, err := readAll(resp.Body)
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(rbody))
	c.note(kind, req, resp.StatusCode)
	if strings.HasPrefix(kind, "envd") && c.proxyAnswer(req, resp, rbody) {
		return resp, nil
	}
	plain, err := decoded(resp.Header, rbody)
	if err != nil {
		c.report(fmt.Errorf("%s: response to %s %s: %w", kind, req.Method, req.URL.Path, err))
		return resp, nil
	}
	h := resp.Header.Clone()
	h.Del("Content-Encoding")
	c.report(v.ValidateResponse(checked, body, resp.StatusCode, h, plain))
	return resp, nil
}

// proxyAnswer tells the vendor's sandbox proxy's own answer (502 for a
// sandbox that is not running or a port nothing listens on, 403 for a
// missing traffic token), which no description publishes but the SDKs
// expect: a JSON object {sandboxId, message, code[, port]}. It reports a
// malformed one and returns whether the answer was the proxy's.
func (c *Checker) proxyAnswer(req *http.Request, resp *http.Response, body []byte) bool {
	if resp.StatusCode != http.StatusBadGateway && resp.StatusCode != http.StatusForbidden {
		return false
	}
	var a struct {
		SandboxID *string `json:"sandboxId"`
		Message   string  `json:"message"`
		Code      int     `json:"code"`
		Port      *int    `json:"port"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil || a.SandboxID == nil {
		return false
	}
	c.note("proxy", req, resp.StatusCode)
	if a.Code != resp.StatusCode || a.Message == "" {
		c.report(fmt.Errorf("proxy answer %d to %s %s: %s", resp.StatusCode, req.Method, req.URL.Path, body))
	}
	return true
}

// method finds an RPC's descriptor from its path (/pkg.Service/Method).
func method(path string) (protoreflect.MethodDescriptor, error) {
	svc, m, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !ok {
		return nil, fmt.Errorf("envd rpc %s: not /service/method", path)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, fmt.Errorf("envd rpc %s: no service %s in the .proto files", path, svc)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("envd rpc %s: %s is not a service", path, svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(m))
	if md == nil {
		return nil, fmt.Errorf("envd rpc %s: no method %s in service %s", path, m, svc)
	}
	return md, nil
}

var strict = protojson.UnmarshalOptions{DiscardUnknown: false}

func decodeMessage(desc protoreflect.MessageDescriptor, data []byte) error {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(desc.FullName())
	if err != nil {
		return err
	}
	msg := mt.New().Interface()
	if err := strict.Unmarshal(data, msg); err != nil {
		return fmt.Errorf("as %s: %w", desc.FullName(), err)
	}
	return nil
}

// connectCodes are Connect's error codes.
var connectCodes = map[string]bool{
	"canceled": true, "unknown": true, "invalid_argument": true, "deadline_exceeded": true,
	"not_found": true, "already_exists": true, "permission_denied": true, "resource_exhausted": true,
	"failed_precondition": true, "aborted": true, "out_of_range": true, "unimplemented": true,
	"internal": true, "unavailable": true, "data_loss": true, "unauthenticated": true,
}

func checkConnectError(data []byte) error {
	var e struct {
		Code    string            `json:"code"`
		Message string            `json:"message"`
		Details []json.RawMessage `json:"details"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return fmt.Errorf("connect error body %q: %w", data, err)
	}
	if !connectCodes[e.Code] {
		return fmt.Errorf("connect error body: unknown code %q", e.Code)
	}
	return nil
}

// decoded is a body as its Content-Encoding (gzip or none) says.
func decoded(h http.Header, body []byte) ([]byte, error) {
	switch strings.ToLower(h.Get("Content-Encoding")) {
	case "", "identity":
		return body, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(zr)
	default:
		return nil, fmt.Errorf("content encoding %q", h.Get("Content-Encoding"))
	}
}

func mediaType(h http.Header) string {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt
}

func (c *Checker) rpc(req *http.Request) (*http.Response, error) {
	md, merr := method(req.URL.Path)
	c.report(merr)
	body, err := readAll(req.Body)
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	streaming := md != nil && (md.IsStreamingClient() || md.IsStreamingServer())
	ct := mediaType(req.Header)
	if md != nil {
		switch {
		case streaming && ct == "application/connect+json":
			frames, err := envelopes(body)
			if err != nil {
				c.report(fmt.Errorf("envd rpc %s request: %w", req.URL.Path, err))
			}
			for _, f := range frames {
				c.report(wrapRPC(req.URL.Path, "request", decodeMessage(md.Input(), f.data)))
			}
		case !streaming && ct == "application/json":
			plain, err := decoded(req.Header, body)
			if err == nil {
				err = decodeMessage(md.Input(), plain)
			}
			c.report(wrapRPC(req.URL.Path, "request", err))
		default:
			c.report(fmt.Errorf("envd rpc %s: request content type %q (the vendor's SDKs use the JSON codec)", req.URL.Path, ct))
		}
	}
	resp, err := c.Base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	c.note("envd-rpc", req, resp.StatusCode)
	if md == nil {
		return resp, nil
	}
	if !streaming {
		rbody, err := readAll(resp.Body)
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(rbody))
		plain, err := decoded(resp.Header, rbody)
		switch {
		case err != nil:
			c.report(wrapRPC(req.URL.Path, "response", err))
		case c.proxyAnswer(req, resp, plain):
		case resp.StatusCode == http.StatusOK:
			c.report(wrapRPC(req.URL.Path, "response", decodeMessage(md.Output(), plain)))
		default:
			c.report(wrapRPC(req.URL.Path, fmt.Sprintf("error response %d", resp.StatusCode), checkConnectError(plain)))
		}
		return resp, nil
	}
	if resp.StatusCode != http.StatusOK {
		rbody, err := readAll(resp.Body)
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(rbody))
		if !c.proxyAnswer(req, resp, rbody) {
			c.report(wrapRPC(req.URL.Path, fmt.Sprintf("error response %d", resp.StatusCode), checkConnectError(rbody)))
		}
		return resp, nil
	}
	if mt := mediaType(resp.Header); mt != "application/connect+json" {
		c.report(fmt.Errorf("envd rpc %s: stream response content type %q", req.URL.Path, mt))
		return resp, nil
	}
	resp.Body = c.streamChecker(req.URL.Path, resp.Header.Get("Connect-Content-Encoding"), md.Output(), resp.Body)
	return resp, nil
}

func wrapRPC(path, what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("envd rpc %s %s: %w", path, what, err)
}

type frame struct {
	flags byte
	data  []byte
}

// envelopes splits a Connect stream body into its frames.
func envelopes(b []byte) ([]frame, error) {
	var out []frame
	for len(b) > 0 {
		if len(b) < 5 {
			return out, errors.New("truncated envelope header")
		}
		n := binary.BigEndian.Uint32(b[1:5])
		if uint32(len(b)-5) < n {
			return out, errors.New("truncated envelope")
		}
		out = append(out, frame{flags: b[0], data: b[5 : 5+n]})
		b = b[5+n:]
	}
	return out, nil
}

// streamChecker passes a stream body through unchanged, checking each
// envelope as it goes by.
func (c *Checker) streamChecker(path, encoding string, out protoreflect.MessageDescriptor, body io.ReadCloser) io.ReadCloser {
	pr, pw := io.Pipe()
	tee := io.TeeReader(body, pw)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := bufio.NewReader(pr)
		sawEnd := false
		for {
			var hdr [5]byte
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				break // the end, or the client stopped reading
			}
			n := binary.BigEndian.Uint32(hdr[1:])
			data := make([]byte, n)
			if _, err := io.ReadFull(r, data); err != nil {
				break
			}
			if hdr[0]&0x01 != 0 {
				// compressed with the stream's Connect-Content-Encoding
				if encoding != "gzip" {
					c.report(fmt.Errorf("envd rpc %s: a compressed frame with encoding %q", path, encoding))
					continue
				}
				zr, err := gzip.NewReader(bytes.NewReader(data))
				if err == nil {
					data, err = io.ReadAll(zr)
				}
				if err != nil {
					c.report(fmt.Errorf("envd rpc %s: frame: %w", path, err))
					continue
				}
			}
			switch {
			case hdr[0]&0x02 != 0:
				sawEnd = true
				var end struct {
					Error    json.RawMessage     `json:"error"`
					Metadata map[string][]string `json:"metadata"`
				}
				dec := json.NewDecoder(bytes.NewReader(data))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&end); err != nil {
					c.report(fmt.Errorf("envd rpc %s: end-of-stream frame %q: %w", path, data, err))
				} else if len(end.Error) > 0 {
					c.report(wrapRPC(path, "end-of-stream error", checkConnectError(end.Error)))
				}
			case hdr[0]&^0x03 != 0:
				c.report(fmt.Errorf("envd rpc %s: frame flags %#x", path, hdr[0]))
			default:
				if sawEnd {
					c.report(fmt.Errorf("envd rpc %s: a message after the end of the stream", path))
				}
				c.report(wrapRPC(path, "stream message", decodeMessage(out, data)))
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return &teeBody{r: tee, body: body, pw: pw, done: done}
}

// teeBody is a stream body whose frames a checker goroutine reads as they
// pass; its end (EOF, error or Close) waits for the checks of all of them.
type teeBody struct {
	r    io.Reader
	body io.ReadCloser
	pw   *io.PipeWriter
	done chan struct{}
	once sync.Once
}

func (t *teeBody) finish() {
	t.once.Do(func() { _ = t.pw.Close() })
	<-t.done
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil {
		t.finish()
	}
	return n, err
}

func (t *teeBody) Close() error {
	err := t.body.Close()
	t.finish()
	return err
}

// DecodeRPC decodes a JSON RPC message strictly into its generated type (a
// helper for tests that read the wire themselves).
func DecodeRPC(data []byte, msg proto.Message) error { return strict.Unmarshal(data, msg) }
