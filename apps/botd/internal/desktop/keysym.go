package desktop

// Modifier keysyms the keyboard mapping uses (the rest: shared.KeyKeysym,
// shared.TypingKeysyms).
const (
	keysymShiftL  = 0xffe1
	keysymCapsLck = 0xffe5
)
