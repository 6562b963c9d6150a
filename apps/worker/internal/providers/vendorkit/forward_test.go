package vendorkit

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// listening counts this process's listening TCP sockets (/proc/self/fd's
// socket inodes in state LISTEN in /proc/self/net/tcp{,6}).
func listening(t *testing.T) int {
	t.Helper()
	mine := map[string]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if fs := strings.Fields(sc.Text()); len(fs) >= 10 && fs[3] == "0A" && mine[fs[9]] {
				n++
			}
		}
		fh.Close()
	}
	return n
}

// credential stands in for a vendor's routing credential.
type credential struct{ next http.RoundTripper }

func (c credential) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Vendor-Token", "vendor-secret")
	return c.next.RoundTrip(r)
}

// TestForwarderOpensNoPort: the forwarder adds the vendor's credential
// only for the worker's own client; it opens no listening socket another
// local user could connect to, its URL reaches nothing by itself, and a
// closed forwarder answers nothing.
func TestForwarderOpensNoPort(t *testing.T) {
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Vendor-Token") != "vendor-secret" {
			http.Error(w, "no credential", http.StatusForbidden)
			return
		}
		_, _ = io.WriteString(w, "routed "+r.URL.Path+"?"+r.URL.RawQuery)
	}))
	defer vendor.Close()
	target, _ := url.Parse(vendor.URL + "/sandbox/7000")
	before := listening(t)
	f := NewForwarder(target, credential{next: http.DefaultTransport}, func(context.Context) (int, string, bool) {
		return http.StatusBadGateway, "does not answer", false
	})
	resp, err := f.Client().Get(f.URL() + "/screens?x=1")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "routed /sandbox/7000/screens?x=1", string(b), "the target's path prefix, the request's path and query")
	require.Equal(t, before, listening(t), "the forwarder opened a listening socket")
	_, err = http.Get(f.URL() + "/screens")
	require.Error(t, err, "any other client reaches nothing at the forwarder's URL")

	f.Close()
	_, err = f.Client().Get(f.URL() + "/screens")
	require.ErrorIs(t, err, ErrClosed)
}

// TestForwarderSlowAnswerIsUse: a request counts as use until its answer
// was read, so an answer slower than the idle window does not leave the
// machine idle when it ends; /health is never use.
func TestForwarderSlowAnswerIsUse(t *testing.T) {
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		time.Sleep(400 * time.Millisecond)
		_, _ = io.WriteString(w, "late")
	}))
	defer vendor.Close()
	target, _ := url.Parse(vendor.URL)
	f := NewForwarder(target, nil, func(context.Context) (int, string, bool) { return http.StatusBadGateway, "", false })
	defer f.Close()
	const idle = 200 * time.Millisecond
	for _, c := range []struct {
		path string
		use  bool
	}{{"/slow", true}, {"/health", false}} {
		f.TouchAt(time.Time{})
		resp, err := f.Client().Get(f.URL() + c.path)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, "late", string(b))
		require.Equal(t, c.use, f.InUse(time.Now(), idle), "%s in use right after its slow answer", c.path)
	}
}
