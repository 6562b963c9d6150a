package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/moby/moby/api/types/mount"
)

// A worker-owned home (Spec.HomeDir) outlives the machines that use it:
// a replacement, with users of its own, takes over the files the last
// machine's users left. The local provider records in the home's parent
// directory which ids own it (owners.json, root's 0600) and hands what the
// previous ids own to the new ones.

// checkHomeDir accepts "" (the machine's own home) or an existing
// absolute directory that is no link.
func checkHomeDir(dir string) error {
	if dir == "" {
		return nil
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("home dir %q: want a clean absolute path", dir)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("home dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("home dir %s is not a directory", dir)
	}
	return nil
}

// homeOwners is owners.json: the ids that own a worker-owned home.
type homeOwners struct {
	DesktopUID int `json:"desktopUid"`
	BotUID     int `json:"botUid"`
	GID        int `json:"gid"`
}

// adoptHome gives the local computer's users u the worker-owned home: what
// the ids in owners.json own is handed to u's (links changed themselves,
// never followed), the parent directory becomes root's, group u's shared
// group, mode 0710 (no other computer's users enter it), and owners.json
// names u. Ids are per computer number (base+3i, +1, +2), so an old id is
// never one of the new ones of another role.
func adoptHome(home string, u localUsers) error {
	parent := filepath.Dir(home)
	ownersFile := filepath.Join(parent, "owners.json")
	want := homeOwners{DesktopUID: u.DesktopUID, BotUID: u.BotUID, GID: u.GID}
	var old homeOwners
	b, err := os.ReadFile(ownersFile)
	known := err == nil
	switch {
	case known:
		if err := json.Unmarshal(b, &old); err != nil {
			return fmt.Errorf("%s: %w", ownersFile, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if known && old != want {
		uids := map[int]int{old.DesktopUID: u.DesktopUID, old.BotUID: u.BotUID}
		gids := map[int]int{old.DesktopUID: u.DesktopUID, old.BotUID: u.BotUID, old.GID: u.GID}
		if err := filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			nu, okU := uids[int(st.Uid)]
			ng, okG := gids[int(st.Gid)]
			if !okU && !okG {
				return nil
			}
			if !okU {
				nu = int(st.Uid)
			}
			if !okG {
				ng = int(st.Gid)
			}
			return os.Lchown(p, nu, ng)
		}); err != nil {
			return fmt.Errorf("hand the home to %s and %s: %w", u.Desktop, u.Bot, err)
		}
	}
	fd, err := syscall.Open(parent, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.Fchown(fd, 0, u.GID); err != nil {
		return err
	}
	if err := syscall.Fchmod(fd, 0o710); err != nil {
		return err
	}
	if known && old == want {
		return nil
	}
	nb, _ := json.Marshal(want)
	return writeSecret(ownersFile, string(nb))
}

// OwnHome reports whether ref's machine keeps a home of its own (it was
// made without a Spec.HomeDir): its computers/<ref>/home.
func (l *Local) OwnHome(_ context.Context, ref string) (bool, error) {
	if err := checkRef(ref); err != nil {
		return false, err
	}
	m, err := l.readMeta(ref)
	if err != nil {
		return false, err
	}
	return m.Home == "", nil
}

// OwnHome reports whether ref's container keeps /home on a volume of its
// own (it was made without a Spec.HomeDir).
func (d *Docker) OwnHome(ctx context.Context, ref string) (bool, error) {
	c, err := d.inspect(ctx, ref)
	if err != nil {
		return false, err
	}
	for _, m := range c.Mounts {
		if m.Destination == "/home" {
			return m.Type == mount.TypeVolume, nil
		}
	}
	return false, nil
}
