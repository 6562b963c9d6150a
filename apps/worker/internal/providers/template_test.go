package providers

import (
	"errors"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
	"github.com/open-bot/computer/apps/worker/internal/secret"
	"github.com/open-bot/computer/pkg/shared"
)

// TestCheckTemplate: the e2b kind takes open-bot, desktop and its
// configured default (which "" gets); a provider without templates takes
// only ""; every refusal is a 400 TEMPLATE_UNAVAILABLE naming what there
// is. (No API is called: New reaches nothing.)
func TestCheckTemplate(t *testing.T) {
	sealer, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	require.NoError(t, err)
	mk := func(def string) *E2B {
		k, err := e2b.NewKey("e2b_template_test_key_0123456789", sealer)
		require.NoError(t, err)
		p, err := e2b.New(e2b.Options{APIURL: "http://127.0.0.1:9", Key: k, Template: def})
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return NewE2B(p)
	}
	refused := func(t *testing.T, err error, says string) {
		t.Helper()
		var ae *shared.APIError
		require.True(t, errors.As(err, &ae), "an APIError, got %v", err)
		require.Equal(t, http.StatusBadRequest, ae.Status)
		require.Equal(t, shared.CodeTemplateUnavailable, ae.Code)
		require.Contains(t, ae.Message, says)
	}

	x := mk("")
	for name, want := range map[string]string{"": "open-bot", "open-bot": "open-bot", "desktop": "desktop"} {
		got, err := CheckTemplate(x, KindE2B, name)
		require.NoError(t, err, name)
		require.Equal(t, want, got, "template %q", name)
	}
	_, err = CheckTemplate(x, KindE2B, "windows")
	refused(t, err, `template "windows": the e2b provider has desktop, open-bot`)

	// E2B_TEMPLATE=desktop: "" is the desktop; a custom default is taken too.
	got, err := CheckTemplate(mk("desktop"), KindE2B, "")
	require.NoError(t, err)
	require.Equal(t, "desktop", got)
	custom := mk("open-bot-v2")
	got, err = CheckTemplate(custom, KindE2B, "open-bot-v2")
	require.NoError(t, err)
	require.Equal(t, "open-bot-v2", got)
	got, err = CheckTemplate(custom, KindE2B, "desktop")
	require.NoError(t, err)
	require.Equal(t, "desktop", got)

	// No templates: "" only.
	got, err = CheckTemplate(NewAttach(), KindAttach, "")
	require.NoError(t, err)
	require.Equal(t, "", got)
	_, err = CheckTemplate(NewAttach(), KindAttach, "desktop")
	refused(t, err, "the attach provider has no templates")
}
