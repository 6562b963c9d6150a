package osuser

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Dir is one directory botd owns, with its exact owner and mode.
type Dir struct {
	Path  string
	Owner User
	// GID overrides the owner's primary group when non-zero (e.g. bots).
	GID  uint32
	Mode os.FileMode
}

// PrepareDirs creates each directory (parents as root 0755 when missing) and
// forces owner and mode, so a restart repairs drift. Order matters: parents
// first. botd runs as root, so a symlink in its place (the bot user could
// plant one in its workspace) is never followed: it is removed and the
// directory made anew. Any other non-directory is refused.
func PrepareDirs(dirs []Dir) error {
	for _, d := range dirs {
		if fi, err := os.Lstat(d.Path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if err := os.Remove(d.Path); err != nil {
				return fmt.Errorf("prepare %s: remove planted symlink: %w", d.Path, err)
			}
		}
		if err := os.MkdirAll(d.Path, 0o755); err != nil {
			return fmt.Errorf("prepare %s: %w", d.Path, err)
		}
		gid := d.Owner.GID
		if d.GID != 0 {
			gid = d.GID
		}
		fd, err := unix.Open(d.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("prepare %s: not a plain directory: %w", d.Path, err)
		}
		mode := uint32(d.Mode.Perm())
		if d.Mode&os.ModeSetgid != 0 {
			mode |= unix.S_ISGID
		}
		err = unix.Fchown(fd, int(d.Owner.UID), int(gid))
		if err == nil {
			// chown clears setgid, so the mode comes second.
			err = unix.Fchmod(fd, mode)
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("prepare %s: %w", d.Path, err)
		}
	}
	return nil
}

// Layout is the design's table of durable paths under home.
func Layout(home string, desktop, bot User) []Dir {
	return []Dir{
		{Path: home, Owner: Root, Mode: 0o755},
		{Path: filepath.Join(home, "bot"), Owner: bot, GID: uint32(BotsGID), Mode: SetgidDir},
		{Path: filepath.Join(home, "bot", "bots"), Owner: bot, GID: uint32(BotsGID), Mode: SetgidDir},
		{Path: filepath.Join(home, "bot", "shared"), Owner: bot, GID: uint32(BotsGID), Mode: SetgidDir},
		{Path: filepath.Join(home, "bot", "shared", "downloads"), Owner: bot, GID: uint32(BotsGID), Mode: SetgidDir},
		{Path: filepath.Join(home, "bot", ".codex"), Owner: bot, Mode: 0o700},
		{Path: filepath.Join(home, "desktop"), Owner: desktop, Mode: 0o755},
		{Path: filepath.Join(home, "desktop", "screens"), Owner: desktop, Mode: 0o755},
		{Path: filepath.Join(home, ".botd"), Owner: Root, Mode: 0o700},
	}
}

// BotDir is a teammate's own folder (bot, setgid 2775).
func BotDir(home, botID string, bot User) Dir {
	return Dir{Path: filepath.Join(home, "bot", "bots", botID), Owner: bot, GID: uint32(BotsGID), Mode: SetgidDir}
}

// SetgidDir is a shared folder's mode, 2775: group-writable and setgid so
// files either user creates stay in the bots group. (A literal 0o2775 is not
// setgid to os.Chmod: Go's FileMode has its own bit for it.)
const SetgidDir = os.ModeSetgid | 0o775
