// Package vendorkit holds what every cloud vendor's adapter needs the same
// way: the vendor's API key, sealed at rest and never rendered.
package vendorkit

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// Key is a vendor's API key as a provider holds it: sealed with the
// worker's sealer (AES-GCM, like botd tokens) and opened only to set the
// header of one request. It prints as a placeholder whatever verb or
// encoder meets it, so no log line, error or answer can carry it.
type Key struct {
	sealed []byte
	s      *secret.Sealer
	vendor string // "e2b", "daytona": the placeholder and the seal's AAD
	env    string // the variable that sets it, for the error of a nil key
}

// NewKey seals plain with s for vendor; env names the variable that sets
// the key (E2B_API_KEY), for errors.
func NewKey(plain string, s *secret.Sealer, vendor, env string) (*Key, error) {
	plain = strings.TrimSpace(plain)
	if plain == "" {
		return nil, fmt.Errorf("%s: empty API key", vendor)
	}
	if s == nil {
		return nil, fmt.Errorf("%s: no sealer for the API key", vendor)
	}
	b, err := s.Seal([]byte(plain), vendor+"-api-key")
	if err != nil {
		return nil, fmt.Errorf("%s: seal the API key: %w", vendor, err)
	}
	return &Key{sealed: b, s: s, vendor: vendor, env: env}, nil
}

// Open is the key in the clear, for one request's header.
func (k *Key) Open() (string, error) {
	if k == nil {
		return "", errors.New("no API key (set the vendor's API key variable, or its _FILE)")
	}
	b, err := k.s.Open(k.sealed, k.vendor+"-api-key")
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// String, GoString and MarshalText keep the key out of every rendering.
func (k *Key) String() string               { return k.placeholder() }
func (k *Key) GoString() string             { return k.placeholder() }
func (k *Key) MarshalText() ([]byte, error) { return []byte(k.placeholder()), nil }

func (k *Key) placeholder() string {
	if k == nil {
		return "[no api key]"
	}
	return "[" + k.vendor + " api key]"
}

// KeyFromEnv reads the variable env (E2B_API_KEY), or the file env_FILE
// names, which must be a regular file of the worker's own user with mode
// 0600 or stricter (as the worker's own token files). "" and no error when
// neither is set.
func KeyFromEnv(getenv func(string) string, env string) (string, error) {
	if v := strings.TrimSpace(getenv(env)); v != "" {
		return v, nil
	}
	fv := env + "_FILE"
	f := strings.TrimSpace(getenv(fv))
	if f == "" {
		return "", nil
	}
	st, err := os.Stat(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", fv, err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	uid := os.Geteuid()
	switch {
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("%s %s is not a regular file", fv, f)
	case sys == nil || int(sys.Uid) != uid:
		return "", fmt.Errorf("%s %s is not owned by the worker's user (uid %d): fix: chown %d %s && chmod 600 %s", fv, f, uid, uid, f, f)
	case st.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("%s %s is mode %04o: the key file must be mode 0600 (or stricter); fix: chmod 600 %s", fv, f, st.Mode().Perm(), f)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", fv, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s %s is empty", fv, f)
	}
	return v, nil
}
