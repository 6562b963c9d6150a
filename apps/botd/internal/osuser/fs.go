package osuser

import (
	"fmt"
	"os"
	"path/filepath"
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
// first.
func PrepareDirs(dirs []Dir) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d.Path, 0o755); err != nil {
			return fmt.Errorf("prepare %s: %w", d.Path, err)
		}
		gid := d.Owner.GID
		if d.GID != 0 {
			gid = d.GID
		}
		if err := os.Lchown(d.Path, int(d.Owner.UID), int(gid)); err != nil {
			return fmt.Errorf("chown %s: %w", d.Path, err)
		}
		// os.Chmod maps ModeSetgid to S_ISGID.
		if err := os.Chmod(d.Path, d.Mode); err != nil {
			return fmt.Errorf("chmod %s: %w", d.Path, err)
		}
	}
	return nil
}

// Layout is the design's table of durable paths under home.
func Layout(home string, desktop, bot User) []Dir {
	return []Dir{
		{Path: home, Owner: Root, Mode: 0o755},
		{Path: filepath.Join(home, "bot"), Owner: bot, GID: BotsGID, Mode: SetgidDir},
		{Path: filepath.Join(home, "bot", "bots"), Owner: bot, GID: BotsGID, Mode: SetgidDir},
		{Path: filepath.Join(home, "bot", "shared"), Owner: bot, GID: BotsGID, Mode: SetgidDir},
		{Path: filepath.Join(home, "bot", "shared", "downloads"), Owner: bot, GID: BotsGID, Mode: SetgidDir},
		{Path: filepath.Join(home, "bot", ".codex"), Owner: bot, Mode: 0o700},
		{Path: filepath.Join(home, "desktop"), Owner: desktop, Mode: 0o755},
		{Path: filepath.Join(home, "desktop", "screens"), Owner: desktop, Mode: 0o755},
		{Path: filepath.Join(home, ".botd"), Owner: Root, Mode: 0o700},
	}
}

// BotDir is a teammate's own folder (bot, setgid 2775).
func BotDir(home, botID string, bot User) Dir {
	return Dir{Path: filepath.Join(home, "bot", "bots", botID), Owner: bot, GID: BotsGID, Mode: SetgidDir}
}

// SetgidDir is a shared folder's mode, 2775: group-writable and setgid so
// files either user creates stay in the bots group. (A literal 0o2775 is not
// setgid to os.Chmod: Go's FileMode has its own bit for it.)
const SetgidDir = os.ModeSetgid | 0o775
