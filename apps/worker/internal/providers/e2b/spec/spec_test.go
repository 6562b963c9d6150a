package spec

import (
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestLoadAndValidate(t *testing.T) {
	cp, err := ControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Envd(); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/sandboxes", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", "k")
	if err := cp.ValidateRequest(req, []byte(`{"templateID":"base","timeout":60}`)); err != nil {
		t.Fatalf("a published request fails: %v", err)
	}
	if err := cp.ValidateRequest(req, []byte(`{"templateID":"base","timeoutSeconds":60}`)); err == nil || !strings.Contains(err.Error(), "timeoutSeconds") {
		t.Fatalf("an unpublished field passes: %v", err)
	}
	bad := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/sandboxes/x/explode", nil)
	bad.Header.Set("X-API-Key", "k")
	if err := cp.ValidateRequest(bad, nil); err == nil {
		t.Fatal("an unpublished route passes")
	}
	get := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/sandboxes/abc", nil)
	get.Header.Set("X-API-Key", "k")
	h := http.Header{"Content-Type": {"application/json"}}
	if err := cp.ValidateResponse(get, nil, http.StatusNotFound, h, []byte(`{"code":404,"message":"sandbox \"abc\" not found"}`)); err != nil {
		t.Fatalf("a published error fails: %v", err)
	}
	if err := cp.ValidateResponse(get, nil, http.StatusTeapot, h, []byte(`{"code":418,"message":"no"}`)); err == nil {
		t.Fatal("an unpublished status passes")
	}
}

// checked runs one exchange through a Checker in front of handler and
// returns what it reported.
func checked(t *testing.T, handler http.HandlerFunc, req *http.Request) []string {
	t.Helper()
	srv := httptest.NewServer(handler)
	defer srv.Close()
	var got []string
	c, err := NewChecker(http.DefaultTransport, func(err error) { got = append(got, err.Error()) })
	if err != nil {
		t.Fatal(err)
	}
	c.Aliases = SDKAliases
	u, _ := url.Parse(srv.URL)
	req.URL.Scheme, req.URL.Host = u.Scheme, u.Host
	resp, err := (&http.Client{Transport: c}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	return got
}

func jsonAnswer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func newReq(method, path, body string, h map[string]string) *http.Request {
	req, _ := http.NewRequest(method, "http://placeholder"+path, strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	return req
}

// TestCheckerCatches holds the Checker itself to account: each exchange
// breaks the spec in one way and must be reported; the good ones must not.
func TestCheckerCatches(t *testing.T) {
	key := map[string]string{"X-API-Key": "k", "Content-Type": "application/json"}
	envdH := map[string]string{"E2b-Sandbox-Id": "ix", "E2b-Sandbox-Port": "49983", "X-Access-Token": "t", "Content-Type": "application/json"}
	good := `{"templateID":"base","sandboxID":"ix","clientID":"c","envdVersion":"0.5.7","envdAccessToken":"t","trafficAccessToken":null,"domain":"e2b.localhost"}`
	cases := []struct {
		name    string
		handler http.HandlerFunc
		req     *http.Request
		want    string // "" = no report
	}{
		{"published create", jsonAnswer(201, good), newReq("POST", "/sandboxes", `{"templateID":"base"}`, key), ""},
		{"an answer field the spec lacks", jsonAnswer(201, strings.TrimSuffix(good, "}")+`,"extra":1}`), newReq("POST", "/sandboxes", `{"templateID":"base"}`, key), "extra"},
		{"a required answer field missing", jsonAnswer(201, `{"templateID":"base","sandboxID":"ix","clientID":"c"}`), newReq("POST", "/sandboxes", `{"templateID":"base"}`, key), "envdVersion"},
		{"an unpublished status", jsonAnswer(200, good), newReq("POST", "/sandboxes", `{"templateID":"base"}`, key), "status"},
		{"an unpublished route", jsonAnswer(200, `{}`), newReq("POST", "/sandboxes/ix/explode", `{}`, key), "explode"},
		{"a request field the spec lacks", jsonAnswer(201, good), newReq("POST", "/sandboxes", `{"templateID":"base","timeoutSeconds":5}`, key), "timeoutSeconds"},
		{"no API key", jsonAnswer(201, good), newReq("POST", "/sandboxes", `{"templateID":"base"}`, map[string]string{"Content-Type": "application/json"}), "security"},
		{"the SDK's v2 create, as the published one", jsonAnswer(201, good), newReq("POST", "/v2/sandboxes", `{"templateID":"base"}`, key), ""},
		{"the SDK's v2 connect, as the published one", jsonAnswer(201, good), newReq("POST", "/v2/sandboxes/ix/connect", `{"timeout":5,"memory":false}`, key), ""},
		{"the SDK's v2 connect answering a status the published one lacks", jsonAnswer(202, good), newReq("POST", "/v2/sandboxes/ix/connect", `{"timeout":5}`, key), "202"},
		{"connect 201", jsonAnswer(201, good), newReq("POST", "/sandboxes/ix/connect", `{"timeout":5}`, key), ""},
		{"rpc: a published answer", jsonAnswer(200, `{"entry":{"name":"a","type":"FILE_TYPE_FILE","path":"/a"}}`), newReq("POST", "/filesystem.Filesystem/Stat", `{"path":"/a"}`, envdH), ""},
		{"rpc: an answer field the .proto lacks", jsonAnswer(200, `{"entry":{"name":"a","kind":"file"}}`), newReq("POST", "/filesystem.Filesystem/Stat", `{"path":"/a"}`, envdH), "kind"},
		{"rpc: a request field the .proto lacks", jsonAnswer(200, `{}`), newReq("POST", "/filesystem.Filesystem/Stat", `{"file":"/a"}`, envdH), "file"},
		{"rpc: an unknown method", jsonAnswer(200, `{}`), newReq("POST", "/filesystem.Filesystem/Chmod", `{}`, envdH), "Chmod"},
		{"rpc: a bad error code", jsonAnswer(404, `{"code":404,"message":"no"}`), newReq("POST", "/filesystem.Filesystem/Stat", `{"path":"/a"}`, envdH), "connect error"},
		{"envd: a download of the wrong type", jsonAnswer(200, `{}`), newReq("GET", "/files?path=/a", "", map[string]string{"E2b-Sandbox-Id": "ix", "X-Access-Token": "t"}), "application/json"},
		{"the proxy's 502 for a sandbox that is not running", jsonAnswer(502, `{"sandboxId":"ix","message":"The sandbox was not found","code":502}`), newReq("GET", "/health", "", map[string]string{"E2b-Sandbox-Id": "ix"}), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := checked(t, tc.handler, tc.req)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("reported a good exchange: %v", got)
			case tc.want != "" && len(got) == 0:
				t.Fatalf("did not report it (want %q)", tc.want)
			case tc.want != "" && !strings.Contains(strings.Join(got, "\n"), tc.want):
				t.Fatalf("reported %v, want a mention of %q", got, tc.want)
			}
		})
	}
}

// TestCheckerStream checks connect+json stream frames as they pass.
func TestCheckerStream(t *testing.T) {
	frame := func(flags byte, s string) []byte {
		b := []byte{flags, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(len(s)))
		return append(b, s...)
	}
	stream := func(frames ...[]byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/connect+json")
			for _, f := range frames {
				_, _ = w.Write(f)
			}
		}
	}
	h := map[string]string{"E2b-Sandbox-Id": "ix", "E2b-Sandbox-Port": "49983", "X-Access-Token": "t", "Content-Type": "application/connect+json"}
	body := string(frame(0, `{"process":{"cmd":"echo"}}`))
	good := stream(frame(0, `{"event":{"start":{"pid":7}}}`), frame(0, `{"event":{"data":{"stdout":"aGkK"}}}`), frame(0, `{"event":{"end":{"exitCode":0,"exited":true,"status":"exit status 0"}}}`), frame(2, `{}`))
	if got := checked(t, good, newReq("POST", "/process.Process/Start", body, h)); len(got) > 0 {
		t.Fatalf("reported a good stream: %v", got)
	}
	bad := stream(frame(0, `{"event":{"start":{"pid":7,"ppid":1}}}`), frame(2, `{}`))
	if got := checked(t, bad, newReq("POST", "/process.Process/Start", body, h)); len(got) == 0 || !strings.Contains(got[0], "ppid") {
		t.Fatalf("a stream message with a field the .proto lacks: reported %v", got)
	}
	badEnd := stream(frame(2, `{"error":{"code":"nope","message":"x"}}`))
	if got := checked(t, badEnd, newReq("POST", "/process.Process/Start", body, h)); len(got) == 0 {
		t.Fatal("an end-of-stream error with an unknown code was not reported")
	}
}
