// Package secret seals the worker's secrets at rest (botd tokens) with
// AES-256-GCM under a key kept in DATA_DIR/secret.key (0600).
package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Sealer encrypts and decrypts with one key.
type Sealer struct{ aead cipher.AEAD }

// LoadOrCreate reads the key at path, or makes a new one (0600) when the
// file does not exist. A key file readable by others, or of the wrong size,
// is refused rather than repaired.
func LoadOrCreate(path string) (*Sealer, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
		_, err = f.Write(key)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %v): chmod 600 it", path, st.Mode().Perm())
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("%s: want a 32-byte key, found %d bytes", path, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal encrypts plain, bound to aad (the computer id: a sealed token moved
// to another row does not open).
func (s *Sealer) Seal(plain []byte, aad string) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := io.ReadFull(rand.Reader, nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, plain, []byte(aad)), nil
}

// Open decrypts what Seal made for aad.
func (s *Sealer) Open(sealed []byte, aad string) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("sealed value too short")
	}
	p, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(aad))
	if err != nil {
		return nil, errors.New("sealed value does not open with this key")
	}
	return p, nil
}
