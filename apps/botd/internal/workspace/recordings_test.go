package workspace_test

import (
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/workspace"
)

// TestRecordingsTravelOnlyWhenAsked: a screen's recordings
// (desktop/screens/<id>/recordings) are in the portable home but left out
// of an export unless it asks (?recordings=1); an archive that carries
// them restores them, owned by the desktop user.
func TestRecordingsTravelOnlyWhenAsked(t *testing.T) {
	u := lookupUsers(t)
	src := newComputer(t, u, workspace.Options{})
	src.populate(t)
	d := u.desktop
	const rec = "desktop/screens/alice/recordings/rec-20260101T000000-0a0b0c0d.mp4"
	src.put(t, rec, "fragmented mp4", d.UID, d.GID, 0o600)

	st, arch := src.export(t, true)
	require.Equal(t, http.StatusOK, st)
	got := readTar(t, arch)
	require.Equal(t, wantNames, names(got), "the default export leaves recordings out")

	get := func(q string) []byte {
		req, _ := http.NewRequest("GET", src.url+"/workspace/export"+q, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := src.client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		return b
	}
	withRec := get("?recordings=1")
	got = readTar(t, withRec)
	require.Contains(t, got, rec)
	require.Contains(t, got, "desktop/screens/alice/recordings/")
	require.Equal(t, len(wantNames)+2, len(got), "%v", names(got))

	dst := newComputer(t, u, workspace.Options{})
	st, body := dst.importTar(t, withRec)
	require.Equal(t, http.StatusOK, st, string(body))
	b, err := os.ReadFile(dst.path(rec))
	require.NoError(t, err)
	require.Equal(t, "fragmented mp4", string(b))
	uid, gid, _ := stat(t, dst.path(rec))
	require.Equal(t, d.UID, uid)
	require.Equal(t, d.GID, gid)
}
