package desktop

import "github.com/open-bot/computer/pkg/shared"

// Keysyms used directly by typing.
const (
	keysymReturn  = 0xff0d
	keysymTab     = 0xff09
	keysymShiftL  = 0xffe1
	keysymCapsLck = 0xffe5
)

// runeKeysym is shared.RuneKeysym.
func runeKeysym(r rune) uint32 { return shared.RuneKeysym(r) }

// keyKeysym is shared.KeyKeysym.
func keyKeysym(name string) (uint32, error) { return shared.KeyKeysym(name) }
