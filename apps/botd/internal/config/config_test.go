package config

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"BOTD_TOKEN": "0123456789abcdef"}))
	require.NoError(t, err)
	require.Equal(t, ":7000", c.Listen)
	require.Equal(t, "/home", c.Home)
	require.Equal(t, "127.0.0.1:1080", c.SocksAddr)
	require.Equal(t, "direct", c.EgressMode)
	require.Equal(t, 10, c.DisplayBase)
	require.Equal(t, 6080, c.ViewPortBase)
	require.Equal(t, 4, c.MaxScreens)
	require.Equal(t, 20*time.Minute, c.ScreenIdle)
	require.Equal(t, "/home/bot", c.Workspace())
	require.Equal(t, "/home/bot/.codex", c.CodexHome())
	require.Equal(t, "/home/.botd", c.StateDir())
}

func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no token", map[string]string{}, "BOTD_TOKEN must be at least 16"},
		{"short token", map[string]string{"BOTD_TOKEN": "fifteen-chars!!"}, "BOTD_TOKEN must be at least 16"},
		{"bad mode", map[string]string{"BOTD_TOKEN": "0123456789abcdef", "EGRESS_MODE": "vpn"}, "EGRESS_MODE"},
		{"bad number", map[string]string{"BOTD_TOKEN": "0123456789abcdef", "MAX_SCREENS": "many"}, "MAX_SCREENS"},
		{"too many screens", map[string]string{"BOTD_TOKEN": "0123456789abcdef", "MAX_SCREENS": "33"}, "MAX_SCREENS"},
		{"relative home", map[string]string{"BOTD_TOKEN": "0123456789abcdef", "BOTD_HOME": "home"}, "BOTD_HOME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromEnv(env(tc.env))
			require.ErrorContains(t, err, tc.want)
			if tok := tc.env["BOTD_TOKEN"]; tok != "" {
				require.NotContains(t, err.Error(), tok)
			}
		})
	}
}

func TestModelKeyAndExtraDomains(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		"BOTD_TOKEN": "0123456789abcdef", "MODEL_UPSTREAM_URL": "https://models.example/v1",
		"MODEL_API_KEY": "k-123", "APPLY_GUARD_EXTRA_DOMAINS": " Jobs.Example.com ,,indeed.com",
	}))
	require.NoError(t, err)
	require.Equal(t, "k-123", c.ModelKey)
	require.Equal(t, "127.0.0.1:0", c.ModelProxyListen)
	_, err = FromEnv(env(map[string]string{"BOTD_TOKEN": "0123456789abcdef", "MODEL_UPSTREAM_URL": "https://models.example/v1"}))
	require.ErrorContains(t, err, "MODEL_API_KEY")
	require.Equal(t, []string{"jobs.example.com", "indeed.com"}, c.ApplyGuardExtraDomains)
}

func TestTokenFile(t *testing.T) {
	f := t.TempDir() + "/token"
	require.NoError(t, os.WriteFile(f, []byte("from-a-file-0123456789\n"), 0o600))
	c, err := FromEnv(env(map[string]string{"BOTD_TOKEN_FILE": f}))
	require.NoError(t, err)
	require.Equal(t, "from-a-file-0123456789", c.Token)
	c, err = FromEnv(env(map[string]string{"BOTD_TOKEN_FILE": f, "BOTD_TOKEN": "env-wins-0123456789"}))
	require.NoError(t, err)
	require.Equal(t, "env-wins-0123456789", c.Token)
	_, err = FromEnv(env(map[string]string{"BOTD_TOKEN_FILE": f + ".missing"}))
	require.ErrorContains(t, err, "BOTD_TOKEN_FILE")
}

// A token file others could read is refused with a message that says how
// to fix it; so is a link or a FIFO in its place (never followed, never a
// hang).
func TestTokenFileRefusedUnlessPrivate(t *testing.T) {
	dir := t.TempDir()
	f := dir + "/token"
	require.NoError(t, os.WriteFile(f, []byte("from-a-file-0123456789\n"), 0o600))
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		require.NoError(t, os.Chmod(f, mode))
		_, err := FromEnv(env(map[string]string{"BOTD_TOKEN_FILE": f}))
		require.ErrorContains(t, err, "chmod 600", "mode %o", mode)
	}
	require.NoError(t, os.Chmod(f, 0o400))
	c, err := FromEnv(env(map[string]string{"BOTD_TOKEN_FILE": f}))
	require.NoError(t, err)
	require.Equal(t, "from-a-file-0123456789", c.Token)

	link := dir + "/link"
	require.NoError(t, os.Symlink(f, link))
	_, err = FromEnv(env(map[string]string{"BOTD_TOKEN_FILE": link}))
	require.Error(t, err, "a symlink is not followed")
	fifo := dir + "/fifo"
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	_, err = FromEnv(env(map[string]string{"BOTD_TOKEN_FILE": fifo}))
	require.ErrorContains(t, err, "not a regular file")

	if os.Geteuid() == 0 {
		// Owned by another user (a host user sharing desktop's uid): refused.
		require.NoError(t, os.Chown(f, 60101, 60101))
		_, err = FromEnv(env(map[string]string{"BOTD_TOKEN_FILE": f}))
		require.ErrorContains(t, err, "owned by uid 60101")
	}
}

// TestValidToken: ValidToken is the rule FromEnv applies to BOTD_TOKEN (and
// PUT /token to a rotation's token): both accept and refuse the same ones.
func TestValidToken(t *testing.T) {
	for _, tc := range []struct {
		tok string
		ok  bool
	}{
		{"", false},
		{"fifteen-chars!!", false},
		{"0123456789abcdef", true},
		{"a-longer-token-0123456789abcdef", true},
	} {
		err := ValidToken(tc.tok)
		_, envErr := FromEnv(env(map[string]string{"BOTD_TOKEN": tc.tok}))
		if tc.ok {
			require.NoError(t, err, "%q", tc.tok)
			require.NoError(t, envErr, "%q", tc.tok)
		} else {
			require.ErrorIs(t, err, ErrShortToken, "%q", tc.tok)
			require.ErrorIs(t, envErr, ErrShortToken, "%q", tc.tok)
		}
	}
}
