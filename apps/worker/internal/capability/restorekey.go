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
	// mu guards byHome and onChange.
	mu     sync.Mutex
	byHome map[string]restoreEntry
	// onChange, when set, hears every change (a worker group passes them
	// to its peers, in memory only).
	onChange func(home, scope string, hash []byte)
}

// OnChange sets fn to hear each kept home's key set (its scope and hash)
// or dropped (a nil hash: taken, forgotten), on the caller's goroutine.
func (k *RestoreKeys) OnChange(fn func(home, scope string, hash []byte)) {
	k.mu.Lock()
	k.onChange = fn
	k.mu.Unlock()
}

func (k *RestoreKeys) changed(home string, e *restoreEntry) {
	k.mu.Lock()
	fn := k.onChange
	k.mu.Unlock()
	if fn == nil {
		return
	}
	if e == nil {
		fn(home, "", nil)
		return
	}
	fn(home, e.scope, e.hash[:])
}

// Put sets kept home home's key as a peer announced it (a nil hash drops
// it), without telling OnChange.
func (k *RestoreKeys) Put(home, scope string, hash []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if hash == nil {
		delete(k.byHome, home)
		return
	}
	var e restoreEntry
	if len(hash) != len(e.hash) || scope == "" {
		return
	}
	copy(e.hash[:], hash)
	e.scope = scope
	k.byHome[home] = e
}

// RestoreEntry is one kept home's key as a peer copies it.
type RestoreEntry struct {
	Scope string `json:"scope"`
	Hash  []byte `json:"hash"`
}

// Snapshot copies every kept home's key hash (for a peer that joins).
func (k *RestoreKeys) Snapshot() map[string]RestoreEntry {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]RestoreEntry, len(k.byHome))
	for home, e := range k.byHome {
		out[home] = RestoreEntry{Scope: e.scope, Hash: append([]byte(nil), e.hash[:]...)}
	}
	return out
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
	e := restoreEntry{scope: scope, hash: sha256.Sum256([]byte(key))}
	k.mu.Lock()
	k.byHome[home] = e
	k.mu.Unlock()
	k.changed(home, &e)
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
	k.mu.Unlock()
	if ok {
		k.changed(found.Home, nil) // taken: on no peer either
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
	_, newer := k.byHome[c.Home]
	if !newer {
		k.byHome[c.Home] = c.entry
	}
	k.mu.Unlock()
	if !newer {
		k.changed(c.Home, &c.entry)
	}
}

// Forget drops the key of kept home home (its checkpoints are gone).
func (k *RestoreKeys) Forget(home string) {
	k.mu.Lock()
	delete(k.byHome, home)
	k.mu.Unlock()
	k.changed(home, nil)
}
