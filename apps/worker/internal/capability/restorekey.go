package capability

// Restore keys (issue 36, row 1): a scope's kept home (its computer
// destroyed with keepHome=true) is restored into a new computer of the
// scope only by whoever presents the key the destroy answered, never by
// naming the scope. A restore key is to a kept home what a capability is to
// a live computer: 32 random bytes, shown once, kept only as a SHA-256 in
// memory bound to the scope and the kept home's key, compared in constant
// time, forgotten by a restart (the operator then mints a fresh one).
// Single-use: a restore that succeeds consumes it.

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sync"
)

// RestoreHeader is the request header a restore key travels in (never a
// query).
const RestoreHeader = "X-Restore-Key"

// RestoreKeys holds the hashes of the live restore keys, at most one per
// kept home.
type RestoreKeys struct {
	// mu guards byHome.
	mu     sync.Mutex
	byHome map[string]restoreEntry
}

// restoreEntry is one kept home's key: the scope it restores into and the
// key's hash.
type restoreEntry struct {
	scope string
	hash  [sha256.Size]byte
}

// Claim is a restore key taken by a create: the kept home it opens. The
// create gives it back (Release) when it did not restore.
type Claim struct {
	// Home is the kept home's key in the home store.
	Home  string
	entry restoreEntry
}

// NewRestoreKeys returns an empty set.
func NewRestoreKeys() *RestoreKeys { return &RestoreKeys{byHome: map[string]restoreEntry{}} }

// Mint makes a new restore key for the kept home whose key is home, of
// scope (as the API names it: "team:<id>", "session:<id>" or "account"),
// replacing any older key of that home, and returns it; this is the only
// time the plaintext exists in the worker.
func (k *RestoreKeys) Mint(scope, home string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	key := base64.RawURLEncoding.EncodeToString(b[:])
	k.mu.Lock()
	k.byHome[home] = restoreEntry{scope: scope, hash: sha256.Sum256([]byte(key))}
	k.mu.Unlock()
	return key, nil
}

// Take removes and returns the key presented for scope when it is a live
// restore key of that scope. Every entry is compared in constant time, so
// timing does not tell which scopes have kept homes.
func (k *RestoreKeys) Take(scope, presented string) (Claim, bool) {
	if presented == "" {
		return Claim{}, false
	}
	got := sha256.Sum256([]byte(presented))
	k.mu.Lock()
	defer k.mu.Unlock()
	var found Claim
	ok := false
	for home, e := range k.byHome {
		if subtle.ConstantTimeCompare(got[:], e.hash[:]) == 1 && e.scope == scope {
			found, ok = Claim{Home: home, entry: e}, true
		}
	}
	if ok {
		delete(k.byHome, found.Home)
	}
	return found, ok
}

// Release gives a taken key back (the create that took it restored
// nothing), unless a newer key was minted for its home meanwhile.
func (k *RestoreKeys) Release(c Claim) {
	if c.Home == "" {
		return
	}
	k.mu.Lock()
	if _, newer := k.byHome[c.Home]; !newer {
		k.byHome[c.Home] = c.entry
	}
	k.mu.Unlock()
}

// Forget drops the key of kept home home (its checkpoints are gone).
func (k *RestoreKeys) Forget(home string) {
	k.mu.Lock()
	delete(k.byHome, home)
	k.mu.Unlock()
}
