package cookies

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// jarFile is the on-disk form of the jar.
type jarFile struct {
	Version    int            `json:"version"`
	Cookies    []Cookie       `json:"cookies"`
	Tombstones []tombstoneRow `json:"tombstones,omitempty"`
}

type tombstoneRow struct {
	Key Key `json:"key"`
	Tombstone
}

// readJar reads the jar; a missing file is an empty jar.
func readJar(path string) (map[Key]Cookie, map[Key]Tombstone, error) {
	jar, tombs := map[Key]Cookie{}, map[Key]Tombstone{}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return jar, tombs, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var f jarFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, nil, fmt.Errorf("cookie jar %s: %w", path, err)
	}
	for _, c := range f.Cookies {
		jar[c.Key()] = c
	}
	for _, t := range f.Tombstones {
		tombs[t.Key] = t.Tombstone
	}
	return jar, tombs, nil
}

// writeJar persists the jar atomically: a root-only 0600 temporary file in
// the same directory, synced, then renamed over the old one, and the
// directory synced, so a crash leaves either the old jar or the new one.
func writeJar(path string, jar map[Key]Cookie, tombs map[Key]Tombstone) error {
	f := jarFile{Version: 1, Cookies: sortedCookies(jar)}
	for k, t := range tombs {
		f.Tombstones = append(f.Tombstones, tombstoneRow{Key: k, Tombstone: t})
	}
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("cookie jar: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cookie jar: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".cookies-*.tmp")
	if err != nil {
		return fmt.Errorf("cookie jar: %w", err)
	}
	name := tmp.Name()
	fail := func(err error) error {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("cookie jar: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		return fail(err)
	}
	if os.Geteuid() == 0 {
		if err := tmp.Chown(0, 0); err != nil {
			return fail(err)
		}
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("cookie jar: %w", err)
	}
	if err := os.Rename(name, path); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("cookie jar: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
