// Package capability mints and checks per-computer capabilities (seed 003):
// 32 random bytes, returned once, kept only as a SHA-256 in memory and
// compared in constant time. Nothing is written to disk: a restart forgets
// every capability, and adopt mints a new one that replaces the old.
package capability

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sync"
)

// Header is the request header a capability travels in (never a query).
const Header = "X-Computer-Capability"

// Set holds the hashes of the live capabilities, one per computer.
type Set struct {
	// mu guards hashes and onChange.
	mu     sync.Mutex
	hashes map[string][sha256.Size]byte
	// onChange, when set, hears every Mint and Forget (a worker group
	// passes them to its peers, in memory only).
	onChange func(id string, hash []byte)
}

// Hash is a capability's SHA-256, as the set keeps it.
type Hash = [sha256.Size]byte

// OnChange sets fn to hear each Mint (id and the new hash) and Forget (id
// and a nil hash), after the set has changed, on the caller's goroutine.
func (s *Set) OnChange(fn func(id string, hash []byte)) {
	s.mu.Lock()
	s.onChange = fn
	s.mu.Unlock()
}

func (s *Set) changed(id string, hash []byte) {
	s.mu.Lock()
	fn := s.onChange
	s.mu.Unlock()
	if fn != nil {
		fn(id, hash)
	}
}

// Put sets computer id's hash as a peer announced it (nil: forget it),
// without telling OnChange.
func (s *Set) Put(id string, hash []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hash == nil {
		delete(s.hashes, id)
		return
	}
	var h Hash
	if copy(h[:], hash) == len(h) && len(hash) == len(h) {
		s.hashes[id] = h
	}
}

// Snapshot copies every hash (for a peer that joins).
func (s *Set) Snapshot() map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]byte, len(s.hashes))
	for id, h := range s.hashes {
		out[id] = append([]byte(nil), h[:]...)
	}
	return out
}

// NewSet returns an empty set.
func NewSet() *Set { return &Set{hashes: map[string][sha256.Size]byte{}} }

// Mint makes a new capability for computer id, replacing any old one, and
// returns it; this is the only time the plaintext exists in the worker.
func (s *Set) Mint(id string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	c := base64.RawURLEncoding.EncodeToString(b[:])
	h := sha256.Sum256([]byte(c))
	s.mu.Lock()
	s.hashes[id] = h
	s.mu.Unlock()
	s.changed(id, h[:])
	return c, nil
}

// Check reports whether presented is computer id's live capability.
func (s *Set) Check(id, presented string) bool {
	got := sha256.Sum256([]byte(presented))
	s.mu.Lock()
	want, ok := s.hashes[id]
	s.mu.Unlock()
	// Compare even when unknown, so timing does not tell which ids exist.
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1 && ok && presented != ""
}

// Forget drops computer id's capability (destroyed computers).
func (s *Set) Forget(id string) {
	s.mu.Lock()
	delete(s.hashes, id)
	s.mu.Unlock()
	s.changed(id, nil)
}

// Lookup returns the computer whose live capability presented is (for
// routes that name no computer, like /mcp). Every entry is compared in
// constant time.
func (s *Set) Lookup(presented string) (string, bool) {
	if presented == "" {
		return "", false
	}
	got := sha256.Sum256([]byte(presented))
	s.mu.Lock()
	defer s.mu.Unlock()
	found := ""
	for id, want := range s.hashes {
		if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
			found = id
		}
	}
	return found, found != ""
}
