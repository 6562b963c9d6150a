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
	// mu guards hashes.
	mu     sync.Mutex
	hashes map[string][sha256.Size]byte
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
	s.mu.Lock()
	s.hashes[id] = sha256.Sum256([]byte(c))
	s.mu.Unlock()
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
