package daytona

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// Key is the Daytona API key as the provider holds it: sealed with the worker's
// sealer (AES-GCM, like botd tokens) and opened only to set the X-API-Key
// header of one request. It prints as a placeholder whatever verb or
// encoder meets it, so no log line, error or answer can carry it.
type Key struct {
	sealed []byte
	s      *secret.Sealer
}

// keyAAD binds the sealed key to its use.
const keyAAD = "daytona-api-key"

// NewKey seals plain with s.
func NewKey(plain string, s *secret.Sealer) (*Key, error) {
	plain = strings.TrimSpace(plain)
	if plain == "" {
		return nil, errors.New("daytona: empty API key")
	}
	if s == nil {
		return nil, errors.New("daytona: no sealer for the API key")
	}
	b, err := s.Seal([]byte(plain), keyAAD)
	if err != nil {
		return nil, fmt.Errorf("daytona: seal the API key: %w", err)
	}
	return &Key{sealed: b, s: s}, nil
}

func (k *Key) open() (string, error) {
	if k == nil {
		return "", errors.New("no API key (set DAYTONA_API_KEY or DAYTONA_API_KEY_FILE)")
	}
	b, err := k.s.Open(k.sealed, keyAAD)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// String, GoString and MarshalText keep the key out of every rendering.
func (*Key) String() string               { return "[daytona api key]" }
func (*Key) GoString() string             { return "[daytona api key]" }
func (*Key) MarshalText() ([]byte, error) { return []byte("[daytona api key]"), nil }

// KeyFromEnv reads DAYTONA_API_KEY, or the file DAYTONA_API_KEY_FILE names, which
// must be a regular file of the worker's own user with mode 0600 or
// stricter (as the worker's own token files). "" and no error when neither
// is set.
func KeyFromEnv(getenv func(string) string) (string, error) {
	if v := strings.TrimSpace(getenv("DAYTONA_API_KEY")); v != "" {
		return v, nil
	}
	f := strings.TrimSpace(getenv("DAYTONA_API_KEY_FILE"))
	if f == "" {
		return "", nil
	}
	st, err := os.Stat(f)
	if err != nil {
		return "", fmt.Errorf("DAYTONA_API_KEY_FILE: %w", err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	uid := os.Geteuid()
	switch {
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("DAYTONA_API_KEY_FILE %s is not a regular file", f)
	case sys == nil || int(sys.Uid) != uid:
		return "", fmt.Errorf("DAYTONA_API_KEY_FILE %s is not owned by the worker's user (uid %d): fix: chown %d %s && chmod 600 %s", f, uid, uid, f, f)
	case st.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("DAYTONA_API_KEY_FILE %s is mode %04o: the key file must be mode 0600 (or stricter); fix: chmod 600 %s", f, st.Mode().Perm(), f)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return "", fmt.Errorf("DAYTONA_API_KEY_FILE: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("DAYTONA_API_KEY_FILE %s is empty", f)
	}
	return v, nil
}
