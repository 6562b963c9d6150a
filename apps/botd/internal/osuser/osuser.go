// Package osuser resolves the computer's users and prepares the filesystem
// that botd owns, with the exact owners and modes of the design.
package osuser

import (
	"fmt"
	"os/user"
	"strconv"
)

// BotsGID is the gid of the shared group both users belong to: bots (1100)
// unless BOTD_BOTS_GROUP names another (UseBotsGroup, once at start, before
// anything reads it). The local provider gives each computer a group of its
// own, so no two computers on one host share one.
var BotsGID = 1100

// UseBotsGroup makes the group name the computer's shared group.
func UseBotsGroup(name string) error {
	g, err := user.LookupGroup(name)
	if err != nil {
		return fmt.Errorf("look up group %s: %w", name, err)
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil || gid == 0 {
		return fmt.Errorf("group %s: gid %q: not a group botd can share", name, g.Gid)
	}
	BotsGID = int(gid)
	return nil
}

// User is a resolved account: ids plus every supplementary group, so children
// started as it keep the bots group.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32
	Home   string
}

// Lookup resolves name from the system's user and group databases.
func Lookup(name string) (User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return User{}, fmt.Errorf("look up user %s: %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return User{}, fmt.Errorf("user %s: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return User{}, fmt.Errorf("user %s: gid %q: %w", name, u.Gid, err)
	}
	gids, err := u.GroupIds()
	if err != nil {
		return User{}, fmt.Errorf("user %s: groups: %w", name, err)
	}
	out := User{Name: name, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	for _, g := range gids {
		n, err := strconv.ParseUint(g, 10, 32)
		if err == nil {
			out.Groups = append(out.Groups, uint32(n))
		}
	}
	return out, nil
}

// Root is the user botd itself runs as.
var Root = User{Name: "root", UID: 0, GID: 0, Home: "/root"}
