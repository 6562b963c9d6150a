package providers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/open-bot/computer/pkg/shared"
)

// SingleScreen emulates a backend with one desktop stream per machine (a
// vendor desktop like Box): it wraps another provider and lets only the
// first screen ever used on a machine — its index 0 — through CheckScreen.
// Every other screen's graphical tools get MULTI_SCREEN_UNAVAILABLE; exec,
// files and export/import are untouched. Refs are the inner provider's.
type SingleScreen struct {
	inner Provider
	// dir remembers each machine's first screen across worker restarts
	// (one root-only file per ref, named by the ref's hash).
	dir string

	// mu guards first and the files under dir.
	mu    sync.Mutex
	first map[string]string
}

// NewSingleScreen wraps inner; stateDir keeps which screen came first.
func NewSingleScreen(inner Provider, stateDir string) (*SingleScreen, error) {
	if inner == nil {
		return nil, errors.New("single-screen: no inner provider")
	}
	if !filepath.IsAbs(stateDir) {
		return nil, fmt.Errorf("single-screen: state dir must be absolute, got %q", stateDir)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("single-screen: %w", err)
	}
	return &SingleScreen{inner: inner, dir: stateDir, first: map[string]string{}}, nil
}

// Describe is the inner provider's, with one screen only.
func (s *SingleScreen) Describe() Description {
	d := s.inner.Describe()
	d.Kind = KindSingleScreen
	d.Capabilities.MultiScreen = false
	return d
}

// Provision makes an inner machine.
func (s *SingleScreen) Provision(ctx context.Context, spec Spec) (string, error) {
	return s.inner.Provision(ctx, spec)
}

// Reconnect returns the inner machine behind the one-screen gate.
func (s *SingleScreen) Reconnect(ctx context.Context, ref string, spec Spec) (Machine, error) {
	m, err := s.inner.Reconnect(ctx, ref, spec)
	if err != nil {
		return nil, err
	}
	return &singleMachine{Machine: m, inner: m, s: s, ref: ref}, nil
}

// Stop stops the inner machine; its first screen stays its first.
func (s *SingleScreen) Stop(ctx context.Context, ref string) error { return s.inner.Stop(ctx, ref) }

// Destroy destroys the inner machine and forgets its first screen.
func (s *SingleScreen) Destroy(ctx context.Context, ref string) error {
	if err := s.inner.Destroy(ctx, ref); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.first, ref)
	if err := os.Remove(s.file(ref)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("single-screen: %w", err)
	}
	return nil
}

func (s *SingleScreen) file(ref string) string {
	h := sha256.Sum256([]byte(ref))
	return filepath.Join(s.dir, hex.EncodeToString(h[:12]))
}

// claim returns the machine's first screen, making screenID the first when
// there is none yet.
func (s *SingleScreen) claim(ref, screenID string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.first[ref]; ok {
		return id, nil
	}
	b, err := os.ReadFile(s.file(ref))
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		s.first[ref] = id
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("single-screen: %w", err)
	}
	f, err := os.OpenFile(s.file(ref), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", fmt.Errorf("single-screen: %w", err)
	}
	_, werr := f.WriteString(screenID)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(s.file(ref))
		return "", fmt.Errorf("single-screen: %w", werr)
	}
	s.first[ref] = screenID
	return screenID, nil
}

// singleMachine is an inner machine that allows one screen: every
// operation is the inner machine's, CheckScreen is the gate.
type singleMachine struct {
	Machine
	inner Machine
	s     *SingleScreen
	ref   string
}

// Unwrap is the inner machine, for the optional interfaces (elements,
// recordings) the tools and routes look for after CheckScreen let the
// screen through.
func (m *singleMachine) Unwrap() Machine { return m.inner }

// CheckScreen allows the machine's first screen (index 0) only.
func (m *singleMachine) CheckScreen(ctx context.Context, screenID string) error {
	if screenID == "" {
		return shared.Errorf(http.StatusBadRequest, shared.CodeInvalidID, "no screen id")
	}
	if err := m.inner.CheckScreen(ctx, screenID); err != nil {
		return err
	}
	first, err := m.s.claim(m.ref, screenID)
	if err != nil {
		return err
	}
	if first != screenID {
		return shared.Errorf(http.StatusServiceUnavailable, shared.CodeMultiScreen,
			"this computer has a single screen and another bot uses it; shell and file tools still work")
	}
	return nil
}
