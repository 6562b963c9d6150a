package vnc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rotatedToken is the token the viewer tests rotate to.
const rotatedToken = "computer-token-0123456789abcdef"

// req sends method path with body and headers, returning status and body.
func req(t *testing.T, method, url, body string, hdr map[string]string) (int, string) {
	t.Helper()
	r, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(r)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

// mintLink is POST /screens/{id}/viewer-token with bearer tok.
func mintLink(t *testing.T, base, id, mode, tok string) (int, MintResponse) {
	t.Helper()
	status, body := req(t, "POST", base+"/screens/"+id+"/viewer-token", `{"mode":"`+mode+`"}`, bearer(tok))
	var m MintResponse
	if status == http.StatusOK {
		require.NoError(t, json.Unmarshal([]byte(body), &m))
	}
	return status, m
}

// TestRotationRekeysViewerLinks: botd's API and viewer routes wired as
// run.go wires them. A viewer link cannot rotate the token; after PUT
// /token every link minted before is refused on every viewer route, the old
// bearer neither mints nor opens /vnc, and a link minted with the new
// bearer works.
func TestRotationRekeysViewerLinks(t *testing.T) {
	_, ts := unitServer(t, t.TempDir())
	status, view := mintLink(t, ts.URL, "pg", "view", testToken)
	require.Equal(t, http.StatusOK, status)
	status, control := mintLink(t, ts.URL, "pg", "control", testToken)
	require.Equal(t, http.StatusOK, status)
	status, body := req(t, "GET", ts.URL+"/screens/pg/viewer-state", "", map[string]string{"X-Viewer-Token": view.Token})
	require.Equal(t, http.StatusOK, status, body)

	// A link is no bearer: in any place a request carries one, it cannot
	// rotate (and the bearer in the query cannot either).
	rotate := `{"token":"` + rotatedToken + `"}`
	for name, hdr := range map[string]map[string]string{
		"link as the bearer": bearer(control.Token),
		"link in its header": {"X-Viewer-Token": control.Token},
	} {
		status, body := req(t, "PUT", ts.URL+"/token", rotate, hdr)
		require.Equal(t, http.StatusUnauthorized, status, "%s: %s", name, body)
	}
	status, body = req(t, "PUT", ts.URL+"/token?token="+control.Token, rotate, nil)
	require.Equal(t, http.StatusUnauthorized, status, body)
	status, body = req(t, "PUT", ts.URL+"/token?token="+testToken, rotate, map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"})
	require.Equal(t, http.StatusUnauthorized, status, body)
	status, body = req(t, "GET", ts.URL+"/screens/pg/viewer-state", "", map[string]string{"X-Viewer-Token": view.Token})
	require.Equal(t, http.StatusOK, status, "nothing rotated: the link still works: %s", body)

	status, body = req(t, "PUT", ts.URL+"/token", rotate, bearer(testToken))
	require.Equal(t, http.StatusNoContent, status, body)

	upgrade := map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}
	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
	}{
		{"viewer page", "GET", "/screens/pg/view?token=" + view.Token, nil},
		{"viewer page, control", "GET", control.ViewPath, nil},
		{"viewer state", "GET", "/screens/pg/viewer-state", map[string]string{"X-Viewer-Token": view.Token}},
		{"take control", "POST", "/screens/pg/viewer-lease", map[string]string{"X-Viewer-Token": control.Token}},
		{"give control back", "DELETE", "/screens/pg/viewer-lease", map[string]string{"X-Viewer-Token": control.Token}},
		{"vnc with the link", "GET", control.VNCPath, upgrade},
		{"vnc with the old bearer", "GET", "/screens/pg/vnc?token=" + testToken, upgrade},
		{"mint with the old bearer", "POST", "/screens/pg/viewer-token", bearer(testToken)},
	} {
		body := ""
		if tc.method == "POST" && strings.HasSuffix(tc.path, "viewer-token") {
			body = `{"mode":"view"}`
		}
		status, got := req(t, tc.method, ts.URL+tc.path, body, tc.hdr)
		require.Equal(t, http.StatusUnauthorized, status, "%s after the rotation: %s", tc.name, got)
		require.NotContains(t, got, "vt1.")
	}

	status, fresh := mintLink(t, ts.URL, "pg", "view", rotatedToken)
	require.Equal(t, http.StatusOK, status)
	status, body = req(t, "GET", ts.URL+"/screens/pg/viewer-state", "", map[string]string{"X-Viewer-Token": fresh.Token})
	require.Equal(t, http.StatusOK, status, "a link minted after the rotation: %s", body)
	status, body = req(t, "GET", ts.URL+"/screens/pg/view?token="+fresh.Token, "", nil)
	require.Equal(t, http.StatusOK, status, body)
	status, body = req(t, "GET", ts.URL+"/screens/pg/vnc?token="+rotatedToken, "", upgrade)
	require.Equal(t, http.StatusConflict, status, "the new bearer opens /vnc (the screen is not running): %s", body)
}

// TestMintStraddlingRotation: a mint that passed the bearer check with the
// old token and sends its body only after the rotation gets 401 and no
// link: it would otherwise be signed with the new key, a capability under
// the new token handed to a holder of the old one. The request waits for
// "100 Continue", which botd sends once the handler reads the body, i.e.
// after the bearer check.
func TestMintStraddlingRotation(t *testing.T) {
	_, ts := unitServer(t, t.TempDir())
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	body := `{"mode":"control"}`
	_, err = fmt.Fprintf(conn, "POST /screens/pg/viewer-token HTTP/1.1\r\nHost: botd\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", testToken, len(body))
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, " 100 ", "the handler reads the body only past the bearer check")
	for line != "\r\n" {
		line, err = br.ReadString('\n')
		require.NoError(t, err)
	}

	status, got := req(t, "PUT", ts.URL+"/token", `{"token":"`+rotatedToken+`"}`, bearer(testToken))
	require.Equal(t, http.StatusNoContent, status, got)

	_, err = io.WriteString(conn, body)
	require.NoError(t, err)
	res, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "%s", b)
	require.NotContains(t, string(b), "vt1.")
}
