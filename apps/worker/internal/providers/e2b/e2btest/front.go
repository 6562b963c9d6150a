// Package e2btest puts the E2B emulator behind a front that holds both
// sides to the vendor's published API, for the adapter's and the
// providers' integration tests: every control-plane and envd HTTP request
// and answer is validated against spec/ (kin-openapi, unknown fields
// refused), every Connect-RPC message against the types generated from the
// vendor's .proto files (unknown fields refused), and an unknown route
// fails the test. Traffic to other sandbox ports (botd's) is the image's,
// not the vendor's API, and passes through.
package e2btest

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/filesystem"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/process"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/spec"
)

// envdPort is envd's port in a sandbox.
const envdPort = "49983"

// Front validates traffic on its way to next.
type Front struct {
	t          testing.TB
	cp, envd   *spec.Validator
	next       http.Handler
	rpcMethods map[string]protoreflect.MethodDescriptor

	// mu guards seen and failures.
	mu       sync.Mutex
	seen     []Seen
	failures []string
}

// Seen is one validated exchange: "POST /sandboxes/{sandboxID}/connect"
// style operation (the spec's path template) and the status answered.
type Seen struct {
	Op     string
	Status int
}

// NewFront wraps next.
func NewFront(t testing.TB, next http.Handler) *Front {
	cp, err := spec.ControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	ev, err := spec.Envd()
	if err != nil {
		t.Fatal(err)
	}
	f := &Front{t: t, cp: cp, envd: ev, next: next, rpcMethods: map[string]protoreflect.MethodDescriptor{}}
	for _, fd := range []protoreflect.FileDescriptor{process.File_process_process_proto, filesystem.File_filesystem_filesystem_proto} {
		svcs := fd.Services()
		for i := 0; i < svcs.Len(); i++ {
			ms := svcs.Get(i).Methods()
			for j := 0; j < ms.Len(); j++ {
				m := ms.Get(j)
				f.rpcMethods["/"+string(svcs.Get(i).FullName())+"/"+string(m.Name())] = m
			}
		}
	}
	return f
}

func (f *Front) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.mu.Lock()
	f.failures = append(f.failures, msg)
	f.mu.Unlock()
	f.t.Errorf("spec: %s", msg)
}

func (f *Front) record(op string, status int) {
	f.mu.Lock()
	f.seen = append(f.seen, Seen{Op: op, Status: status})
	f.mu.Unlock()
}

// Seen returns the exchanges validated so far.
func (f *Front) Seen() []Seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Seen(nil), f.seen...)
}

// Failures returns the validation failures so far.
func (f *Front) Failures() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.failures...)
}

// sandboxPort is the sandbox port a request is for ("" for the control
// plane), from the E2B_SANDBOX_URL headers or a {port}-{id}.{domain} host.
func sandboxPort(r *http.Request) string {
	if r.Header.Get("E2b-Sandbox-Id") != "" {
		if p := r.Header.Get("E2b-Sandbox-Port"); p != "" {
			return p
		}
		return envdPort
	}
	host := r.Host
	if i := strings.IndexByte(host, '.'); i > 0 {
		if p, _, ok := strings.Cut(host[:i], "-"); ok {
			return p
		}
	}
	return ""
}

func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	port := sandboxPort(r)
	if port != "" && port != envdPort {
		f.next.ServeHTTP(w, r) // botd's own API: not the vendor's
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if port == envdPort {
		if m, ok := f.rpcMethods[r.URL.Path]; ok {
			f.rpc(w, r, m, body)
			return
		}
		if strings.Count(r.URL.Path, "/") == 2 && strings.Contains(r.URL.Path, ".") {
			f.fail("envd: unknown Connect-RPC method %s", r.URL.Path)
		}
		f.openapi(w, r, body, f.envd, "envd")
		return
	}
	f.openapi(w, r, body, f.cp, "api")
}

// openapi validates one HTTP exchange against v (the answer is buffered:
// control-plane and /files answers are small).
func (f *Front) openapi(w http.ResponseWriter, r *http.Request, body []byte, v *spec.Validator, side string) {
	op := side + " " + r.Method + " " + r.URL.Path
	if route, _, err := v.Route(r); err == nil {
		op = side + " " + r.Method + " " + route.Path
	}
	if err := v.ValidateRequest(r, body); err != nil {
		f.fail("the adapter sent: %v", err)
	}
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, r.Clone(r.Context()))
	if err := v.ValidateResponse(r, body, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
		f.fail("the emulator answered: %v", err)
	}
	f.record(op, rec.Code)
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func newMessage(d protoreflect.MessageDescriptor) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		return nil, err
	}
	return mt.New().Interface(), nil
}

// strict refuses unknown fields.
var strict = protojson.UnmarshalOptions{DiscardUnknown: false}

// rpc validates a Connect-RPC exchange: unary with the JSON codec
// (application/json), server streams as application/connect+json
// envelopes, every message decoded strictly into its generated type.
func (f *Front) rpc(w http.ResponseWriter, r *http.Request, m protoreflect.MethodDescriptor, body []byte) {
	op := "envd rpc " + r.URL.Path
	ct := r.Header.Get("Content-Type")
	streaming := m.IsStreamingServer() || m.IsStreamingClient()
	switch {
	case streaming && ct != "application/connect+json":
		f.fail("%s: a stream must be application/connect+json, got %q", op, ct)
	case !streaming && ct != "application/json":
		f.fail("%s: unary must be application/json (the JSON codec), got %q", op, ct)
	}
	in, err := newMessage(m.Input())
	if err != nil {
		f.fail("%s: %v", op, err)
	}
	if streaming {
		msgs, err := envelopes(body)
		if err != nil {
			f.fail("%s: request: %v", op, err)
		}
		for _, e := range msgs {
			data, err := e.payload(r.Header.Get("Connect-Content-Encoding"))
			if err != nil || e.flags&^1 != 0 {
				f.fail("%s: request envelope flags %#x: %v", op, e.flags, err)
				continue
			}
			if err := strict.Unmarshal(data, in); err != nil {
				f.fail("%s: request message: %v", op, err)
			}
		}
		sw := &streamCheck{ResponseWriter: w, f: f, op: op, out: m.Output()}
		f.next.ServeHTTP(sw, r)
		sw.finish()
		f.record(op, sw.status())
		return
	}
	if plain, err := decoded(r.Header.Get("Content-Encoding"), body); err != nil {
		f.fail("%s: request: %v", op, err)
	} else if err := strict.Unmarshal(plain, in); err != nil {
		f.fail("%s: request: %v", op, err)
	}
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, r.Clone(r.Context()))
	answer, err := decoded(rec.Header().Get("Content-Encoding"), rec.Body.Bytes())
	if err != nil {
		f.fail("%s: answer: %v", op, err)
	}
	if rec.Code == http.StatusOK {
		out, err := newMessage(m.Output())
		if err == nil {
			err = strict.Unmarshal(answer, out)
		}
		if err != nil {
			f.fail("%s: answer: %v", op, err)
		}
	} else if !connectError(answer) {
		f.fail("%s: error answer %d is not a Connect error: %q", op, rec.Code, rec.Body.String())
	}
	f.record(op, rec.Code)
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// connectError: a Connect error body ({"code": "...", "message": ...}).
func connectError(b []byte) bool {
	var e struct {
		Code string `json:"code"`
	}
	return json.Unmarshal(b, &e) == nil && e.Code != ""
}

type envelope struct {
	flags byte
	data  []byte
}

func envelopes(b []byte) ([]envelope, error) {
	var out []envelope
	for len(b) > 0 {
		if len(b) < 5 {
			return out, fmt.Errorf("a truncated envelope (%d bytes)", len(b))
		}
		n := binary.BigEndian.Uint32(b[1:5])
		if uint32(len(b)-5) < n {
			return out, fmt.Errorf("an envelope of %d bytes with %d left", n, len(b)-5)
		}
		out = append(out, envelope{flags: b[0], data: b[5 : 5+n]})
		b = b[5+n:]
	}
	return out, nil
}

// streamCheck passes a server stream through as it is written, decoding
// each complete envelope: data envelopes strictly into the method's output
// type, the end-stream envelope as Connect's {error, metadata}.
type streamCheck struct {
	http.ResponseWriter
	f      *Front
	op     string
	out    protoreflect.MessageDescriptor
	buf    []byte
	code   int
	ended  bool
	frames int
}

func (s *streamCheck) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *streamCheck) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	s.buf = append(s.buf, p...)
	for len(s.buf) >= 5 {
		n := binary.BigEndian.Uint32(s.buf[1:5])
		if uint32(len(s.buf)-5) < n {
			break
		}
		flags, data := s.buf[0], s.buf[5:5+n]
		if flags&1 != 0 {
			plain, err := decoded(s.Header().Get("Connect-Content-Encoding"), data)
			if err != nil {
				s.f.fail("%s: a compressed message: %v", s.op, err)
			}
			flags, data = flags&^1, plain
		}
		s.check(flags, data)
		s.buf = s.buf[5+n:]
	}
	return s.ResponseWriter.Write(p)
}

func (s *streamCheck) check(flags byte, data []byte) {
	s.frames++
	if s.ended {
		s.f.fail("%s: a message after the end of the stream", s.op)
	}
	switch flags {
	case 0:
		msg, err := newMessage(s.out)
		if err == nil {
			err = strict.Unmarshal(data, msg)
		}
		if err != nil {
			s.f.fail("%s: stream message: %v (%s)", s.op, err, data)
		}
	case 2:
		s.ended = true
		var end map[string]json.RawMessage
		if err := json.Unmarshal(data, &end); err != nil {
			s.f.fail("%s: end of stream: %v", s.op, err)
		}
		for k := range end {
			if k != "error" && k != "metadata" {
				s.f.fail("%s: end of stream names %q", s.op, k)
			}
		}
	default:
		s.f.fail("%s: envelope flags %#x", s.op, flags)
	}
}

func (s *streamCheck) Flush() {
	if fl, ok := s.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

func (s *streamCheck) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *streamCheck) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}

// finish: a stream that answered 200 must have ended with an end-stream
// envelope, unless the client went away first (it may close a stream it
// no longer needs, as the adapter does once botd's start is reported).
func (s *streamCheck) finish() {
	if len(s.buf) > 0 && s.code == http.StatusOK && !s.ended {
		// A partial frame: the client went away mid-frame.
		return
	}
}

// payload is an envelope's message, decompressed when its flag says so
// (Connect compresses with the negotiated Connect-Content-Encoding).
func (e envelope) payload(encoding string) ([]byte, error) {
	if e.flags&1 == 0 {
		return e.data, nil
	}
	return decoded(encoding, e.data)
}

// decoded undoes a Content-Encoding (identity or gzip, what Connect's Go
// implementation negotiates).
func decoded(encoding string, b []byte) ([]byte, error) {
	switch encoding {
	case "", "identity":
		return b, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(zr)
	}
	return nil, fmt.Errorf("unknown encoding %q", encoding)
}
