// Package config turns botd's environment into a Config. Every fixed number
// of the design is a default here, so parallel test packages never collide.
package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/open-bot/computer/pkg/shared/egresspolicy"
)

// MinTokenLen is the shortest BOTD_TOKEN botd accepts.
const MinTokenLen = 16

// Config is botd's whole configuration.
type Config struct {
	// Token is BOTD_TOKEN. Never log it.
	Token string
	// Listen is the API address (BOTD_LISTEN, default ":7000").
	Listen string
	// Home is the durable root (BOTD_HOME, default "/home").
	Home string
	// CodexBin is the codex executable (CODEX_BIN, default "codex").
	CodexBin string
	// CodexReadyTimeout bounds the wait for the first app-server to answer at start-up.
	CodexReadyTimeout time.Duration
	// CodexConfigExtraFile is TOML appended to the managed config.toml
	// (CODEX_CONFIG_EXTRA_FILE), e.g. a model provider table.
	CodexConfigExtraFile string
	// ModelUpstream is the model provider's base URL (MODEL_UPSTREAM_URL);
	// when set, Codex reaches it only through botd's model proxy.
	ModelUpstream string
	// ModelKey is the provider's key (MODEL_API_KEY, or MODEL_API_KEY_FILE,
	// root-only). Root keeps it: it never goes to Codex. Never log it.
	ModelKey string
	// ModelProxyListen is the model proxy's loopback address
	// (MODEL_PROXY_LISTEN, default 127.0.0.1:0, a free port).
	ModelProxyListen string
	// SocksAddr is the egress proxy address (SOCKS_LISTEN, default 127.0.0.1:1080).
	SocksAddr string
	// EgressMode is direct or tunnel (EGRESS_MODE, default direct).
	EgressMode string
	// EgressAllow is EGRESS_ALLOW: CIDRs and host:port entries direct mode
	// may reach beyond the public internet (default none).
	EgressAllow *egresspolicy.Policy
	// DisplayBase is the first display number (DISPLAY_BASE, default 10).
	DisplayBase int
	// ViewPortBase is the first noVNC view port (VIEW_PORT_BASE, default 6080).
	ViewPortBase int
	// MaxScreens caps running screens (MAX_SCREENS, default 4).
	MaxScreens int
	// ScreenIdle stops unused screens (SCREEN_IDLE_MINUTES, default 20).
	ScreenIdle time.Duration
	// ApplyGuardExtraDomains extends the apply guard (APPLY_GUARD_EXTRA_DOMAINS, comma-separated).
	ApplyGuardExtraDomains []string
	// DesktopUser and BotUser name the two unprivileged users.
	DesktopUser string
	BotUser     string
	// BotsGroup names their shared group (BOTD_BOTS_GROUP; "" = gid 1100,
	// bots).
	BotsGroup string
	// MaxConns caps each listener's open connections: the API, every
	// screen's view and control port, the model proxy and the SOCKS proxy
	// (BOTD_MAX_CONNS, default 512). Past it a connection is refused at once.
	MaxConns int
	// LogLevel is zerolog's level (BOTD_LOG_LEVEL, default info).
	LogLevel string
}

// ErrShortToken is returned when BOTD_TOKEN is missing or too short.
var ErrShortToken = fmt.Errorf("BOTD_TOKEN must be at least %d characters", MinTokenLen)

// ValidToken is the one rule a bearer token must meet, whether it comes
// from BOTD_TOKEN, BOTD_TOKEN_FILE or a rotation (PUT /token): at least
// MinTokenLen bytes (ErrShortToken otherwise).
func ValidToken(tok string) error {
	if len(tok) < MinTokenLen {
		return ErrShortToken
	}
	return nil
}

// FromEnv reads the configuration from getenv (os.Getenv when nil).
func FromEnv(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	str := func(k, def string) string {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
		return def
	}
	var errs []error
	num := func(k string, def int) int {
		v := strings.TrimSpace(getenv(k))
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("%s: want a non-negative integer, got %q", k, v))
			return def
		}
		return n
	}
	c := Config{
		Token:             getenv("BOTD_TOKEN"),
		Listen:            str("BOTD_LISTEN", ":7000"),
		Home:              str("BOTD_HOME", "/home"),
		CodexBin:          str("CODEX_BIN", "codex"),
		CodexReadyTimeout: time.Duration(num("CODEX_READY_TIMEOUT_SECONDS", 60)) * time.Second,
		SocksAddr:         str("SOCKS_LISTEN", "127.0.0.1:1080"),
		EgressMode:        str("EGRESS_MODE", "direct"),
		DisplayBase:       num("DISPLAY_BASE", 10),
		ViewPortBase:      num("VIEW_PORT_BASE", 6080),
		MaxScreens:        num("MAX_SCREENS", 4),
		MaxConns:          num("BOTD_MAX_CONNS", 512),
		ScreenIdle:        time.Duration(num("SCREEN_IDLE_MINUTES", 20)) * time.Minute,
		DesktopUser:       str("BOTD_DESKTOP_USER", "desktop"),
		BotUser:           str("BOTD_BOT_USER", "bot"),
		BotsGroup:         str("BOTD_BOTS_GROUP", ""),
		LogLevel:          str("BOTD_LOG_LEVEL", "info"),
	}
	c.CodexConfigExtraFile = strings.TrimSpace(getenv("CODEX_CONFIG_EXTRA_FILE"))
	c.ModelUpstream = strings.TrimSpace(getenv("MODEL_UPSTREAM_URL"))
	c.ModelProxyListen = str("MODEL_PROXY_LISTEN", "127.0.0.1:0")
	c.ModelKey = strings.TrimSpace(getenv("MODEL_API_KEY"))
	if f := strings.TrimSpace(getenv("MODEL_API_KEY_FILE")); f != "" && c.ModelKey == "" {
		k, err := readTokenFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("MODEL_API_KEY_FILE: %w", err))
		}
		c.ModelKey = k
	}
	if c.ModelUpstream != "" && c.ModelKey == "" {
		errs = append(errs, errors.New("MODEL_UPSTREAM_URL is set but neither MODEL_API_KEY nor MODEL_API_KEY_FILE is"))
	}
	for _, d := range strings.Split(getenv("APPLY_GUARD_EXTRA_DOMAINS"), ",") {
		if d = strings.ToLower(strings.TrimSpace(d)); d != "" {
			c.ApplyGuardExtraDomains = append(c.ApplyGuardExtraDomains, d)
		}
	}
	if c.Token == "" {
		if f := strings.TrimSpace(getenv("BOTD_TOKEN_FILE")); f != "" {
			tok, err := readTokenFile(f)
			if err != nil {
				return c, fmt.Errorf("BOTD_TOKEN_FILE: %w", err)
			}
			c.Token = tok
		}
	}
	if err := ValidToken(c.Token); err != nil {
		return c, err
	}
	if p, err := egresspolicy.Parse(getenv("EGRESS_ALLOW")); err != nil {
		errs = append(errs, err)
	} else {
		c.EgressAllow = p
	}
	if c.EgressMode != "direct" && c.EgressMode != "tunnel" {
		errs = append(errs, fmt.Errorf("EGRESS_MODE: want direct or tunnel, got %q", c.EgressMode))
	}
	if c.MaxScreens < 1 || c.MaxScreens > 32 {
		errs = append(errs, fmt.Errorf("MAX_SCREENS: want 1..32, got %d", c.MaxScreens))
	}
	if c.MaxConns < 1 {
		errs = append(errs, fmt.Errorf("BOTD_MAX_CONNS: want at least 1, got %d", c.MaxConns))
	}
	if !filepath.IsAbs(c.Home) {
		errs = append(errs, fmt.Errorf("BOTD_HOME: want an absolute path, got %q", c.Home))
	}
	return c, errors.Join(errs...)
}

// Workspace is $BOTD_HOME/bot, the root of file and exec paths.
func (c Config) Workspace() string { return filepath.Join(c.Home, "bot") }

// StateDir is $BOTD_HOME/.botd, botd's root-only state.
func (c Config) StateDir() string { return filepath.Join(c.Home, ".botd") }

// CodexHome is $BOTD_HOME/bot/.codex.
func (c Config) CodexHome() string { return filepath.Join(c.Home, "bot", ".codex") }

// DesktopHome is $BOTD_HOME/desktop.
func (c Config) DesktopHome() string { return filepath.Join(c.Home, "desktop") }

// readTokenFile reads a secret (the token, the model key) from path, which must be a regular file
// owned by the user botd runs as (root) with no group or other permission
// bits: a token file desktop, bot or a host user sharing their uid could
// read is refused, never used.
func readTokenFile(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return "", fmt.Errorf("%s is owned by uid %d; it must be owned by uid %d (root) with mode 0600 or stricter: chown root %s && chmod 600 %s", path, st.Uid, euid, path, path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s has mode %04o; group and others must have no access: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
