package screen

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
)

// cookieName is the only X authorization protocol we use.
const cookieName = "MIT-MAGIC-COOKIE-1"

// familyWild matches any host and display: one entry per file is enough for
// Xvfb, Xlib clients and our own probe (FIELD-NOTES).
const familyWild = 0xffff

// newCookie returns 16 random bytes. The cookie is a secret: never log it.
func newCookie() ([]byte, error) {
	c := make([]byte, 16)
	if _, err := rand.Read(c); err != nil {
		return nil, fmt.Errorf("cookie: %w", err)
	}
	return c, nil
}

// xauthEntry encodes one Xauthority record (all fields big-endian,
// length-prefixed): family, address, display number, name, data.
func xauthEntry(cookie []byte) []byte {
	var b bytes.Buffer
	field := func(p []byte) {
		_ = binary.Write(&b, binary.BigEndian, uint16(len(p)))
		b.Write(p)
	}
	_ = binary.Write(&b, binary.BigEndian, uint16(familyWild))
	field(nil) // address
	field(nil) // display number: any
	field([]byte(cookieName))
	field(cookie)
	return b.Bytes()
}

// writeXauthority writes path atomically with one Wild entry for cookie,
// owned by uid:gid with mode 0600 from the moment it has content.
func writeXauthority(path string, cookie []byte, uid, gid int) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".xauth-*")
	if err != nil {
		return fmt.Errorf("xauthority: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("xauthority: %w", err)
	}
	if err := tmp.Chown(uid, gid); err != nil {
		tmp.Close()
		return fmt.Errorf("xauthority: %w", err)
	}
	if _, err := tmp.Write(xauthEntry(cookie)); err != nil {
		tmp.Close()
		return fmt.Errorf("xauthority: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("xauthority: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("xauthority: %w", err)
	}
	return nil
}
