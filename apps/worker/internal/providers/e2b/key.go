package e2b

import (
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
	"github.com/open-bot/computer/apps/worker/internal/secret"
)

// Key is the E2B API key as the provider holds it: sealed, opened only
// for one request's header, never rendered (vendorkit.Key).
type Key = vendorkit.Key

// NewKey seals plain with s.
func NewKey(plain string, s *secret.Sealer) (*Key, error) {
	return vendorkit.NewKey(plain, s, "e2b", "E2B_API_KEY")
}

// KeyFromEnv reads E2B_API_KEY, or the file E2B_API_KEY_FILE names (a
// regular file of the worker's own user, mode 0600 or stricter). "" and no
// error when neither is set.
func KeyFromEnv(getenv func(string) string) (string, error) {
	return vendorkit.KeyFromEnv(getenv, "E2B_API_KEY")
}
