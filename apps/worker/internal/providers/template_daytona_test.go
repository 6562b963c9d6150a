package providers

import (
	"errors"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/daytona"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/open-bot/computer/pkg/shared"
)

// TestCheckTemplateDaytona: the daytona kind's templates are its
// snapshots: open-bot, desktop and its configured DAYTONA_SNAPSHOT (which
// "" gets); anything else is a 400 TEMPLATE_UNAVAILABLE naming them. (No
// API is called: New reaches nothing.)
func TestCheckTemplateDaytona(t *testing.T) {
	sealer, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	require.NoError(t, err)
	mk := func(def string) *Daytona {
		k, err := daytona.NewKey("dtn_template_test_key_0123456789", sealer)
		require.NoError(t, err)
		p, err := daytona.New(daytona.Options{APIURL: "http://127.0.0.1:9", Key: k, Snapshot: def})
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return NewDaytona(p)
	}
	x := mk("")
	got, err := CheckTemplate(x, KindDaytona, "")
	require.NoError(t, err)
	require.Equal(t, daytona.DefaultSnapshot, got)
	got, err = CheckTemplate(x, KindDaytona, daytona.DesktopSnapshot)
	require.NoError(t, err)
	require.Equal(t, daytona.DesktopSnapshot, got)
	_, err = CheckTemplate(x, KindDaytona, "windows")
	var ae *shared.APIError
	require.True(t, errors.As(err, &ae), "an APIError, got %v", err)
	require.Equal(t, http.StatusBadRequest, ae.Status)
	require.Equal(t, shared.CodeTemplateUnavailable, ae.Code)
	require.Contains(t, ae.Message, "desktop, open-bot")

	y := mk("my-snap")
	got, err = CheckTemplate(y, KindDaytona, "")
	require.NoError(t, err)
	require.Equal(t, "my-snap", got, "no template: the worker's DAYTONA_SNAPSHOT")
	got, err = CheckTemplate(y, KindDaytona, daytona.DesktopSnapshot)
	require.NoError(t, err)
	require.Equal(t, daytona.DesktopSnapshot, got)
}
