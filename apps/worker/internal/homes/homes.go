// Package homes keeps the latest checkpoint of each computer's portable home
// (CONTROL-PLANE.md, Homes): the workspace tar that botd's GET
// /workspace/export produced, keyed by the computer's home key. The Store
// interface is independent of providers; two implementations sit behind it:
// Local (a directory under DATA_DIR) and S3 (an S3-compatible bucket).
//
// Rules every Store keeps (one conformance suite checks both):
//   - Latest-only: Put replaces the previous checkpoint; the revision number
//     counts checkpoints of one key.
//   - A Put that fails (a reader that breaks midway, a killed process, a full
//     disk) leaves the previous checkpoint whole and restorable.
//   - Puts of one key are serialized; different keys proceed in parallel.
//   - Open refuses a stored tar whose size or SHA-256 does not match its
//     recorded revision (ErrCorrupt) before the caller reads a byte, so a
//     damaged checkpoint is never half-imported into a machine.
//   - Home keys are validated (ValidKey): no separators, no dot names.
//
// Checkpoints are bounded (issue 25): the Checkpointer asks botd to stop at
// MaxBytes (COMPUTER_HOME_MAX_BYTES, never above what an import accepts)
// and counts the stream itself, failing with ErrTooLarge one byte past it;
// Local keeps MinFree (COMPUTER_HOME_MIN_FREE_BYTES) free on its disk,
// failing with ErrNoSpace. Either way the staged tar never replaces the
// previous checkpoint. Checkpointer.Forget removes a destroyed computer's
// checkpoint.
package homes

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"regexp"
	"sync"
	"time"
)

// Revision describes one stored checkpoint.
type Revision struct {
	// Number counts the checkpoints of this home key, from 1.
	Number int64 `json:"number"`
	// Size is the tar's length in bytes.
	Size int64 `json:"size"`
	// SHA256 is the tar's digest, lower-case hex.
	SHA256 string `json:"sha256"`
	// At is when the checkpoint was recorded (UTC).
	At time.Time `json:"at"`
}

// Store keeps the latest workspace tar of each home key.
type Store interface {
	// Put stores r (read to EOF) as the key's new latest checkpoint and
	// returns its revision. On any error the previous checkpoint stays.
	Put(ctx context.Context, key string, r io.Reader) (Revision, error)
	// Latest returns the key's current revision; ok is false when the key
	// has no checkpoint.
	Latest(ctx context.Context, key string) (rev Revision, ok bool, err error)
	// Open returns the key's latest tar, already checked against its
	// revision; ErrNotFound when there is none, ErrCorrupt when the stored
	// bytes do not match. The caller closes the reader.
	Open(ctx context.Context, key string) (io.ReadCloser, Revision, error)
	// Delete removes the key's checkpoint; deleting a missing key is not an
	// error.
	Delete(ctx context.Context, key string) error
}

var (
	// ErrNotFound: the home key has no checkpoint.
	ErrNotFound = errors.New("home has no checkpoint")
	// ErrCorrupt: the stored tar does not match its recorded revision.
	ErrCorrupt = errors.New("stored checkpoint is corrupt or truncated")
	// ErrBadKey: the home key is not a valid name.
	ErrBadKey = errors.New("invalid home key")
	// ErrNoSpace: the store ran out of space; the previous checkpoint is kept.
	ErrNoSpace = errors.New("no space left for the checkpoint")
	// ErrEmpty: Put was given an empty stream (never a workspace tar).
	ErrEmpty = errors.New("empty checkpoint")
	// ErrTooLarge: the export went past the checkpoint cap
	// (COMPUTER_HOME_MAX_BYTES); the previous checkpoint is kept.
	ErrTooLarge = errors.New("checkpoint is larger than the cap")
)

// capReader passes at most max bytes of r and fails with ErrTooLarge when
// r has more: it never trusts a size it was told, it counts.
type capReader struct {
	r   io.Reader
	n   int64
	max int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n > c.max {
		return 0, c.err()
	}
	// Read one byte past the cap at most, to tell "exactly max" from more.
	if rest := c.max + 1 - c.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n, c.err()
	}
	return n, err
}

func (c *capReader) err() error {
	return fmt.Errorf("%w of %d bytes (COMPUTER_HOME_MAX_BYTES): the export went on past it", ErrTooLarge, c.max)
}

var keyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// ValidKey reports whether key may name a home: 1-128 characters of
// [A-Za-z0-9_-], starting with a letter or digit (so never ".", "..", a path
// or a hidden name).
func ValidKey(key string) error {
	if !keyRE.MatchString(key) {
		return fmt.Errorf("%w %q: use 1-128 letters, digits, '_' or '-', starting with a letter or digit", ErrBadKey, key)
	}
	return nil
}

// keyLocks serializes operations on one key inside this process.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// lock takes key's lock, giving up when ctx ends; the returned func unlocks.
func (k *keyLocks) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	got := make(chan struct{})
	go func() { l.mu.Lock(); close(got) }()
	select {
	case <-got:
		return func() { l.mu.Unlock(); release() }, nil
	case <-ctx.Done():
		// The goroutine still takes the lock eventually; hand it back then.
		go func() { <-got; l.mu.Unlock(); release() }()
		return nil, ctx.Err()
	}
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// hashingReader counts and hashes what passes through.
type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func newHashingReader(r io.Reader) *hashingReader { return &hashingReader{r: r, h: sha256.New()} }

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

func (h *hashingReader) sum() string { return fmt.Sprintf("%x", h.h.Sum(nil)) }
