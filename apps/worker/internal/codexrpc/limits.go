package codexrpc

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// What a computer's app-server may send the worker. A computer is not
// trusted (issue 25: its teammates have a shell on it, and one replaced its
// Codex with a program that sent 16 MiB method names and agent deltas), so
// every message is read under these caps; the first excess closes the
// connection with a *LimitError, which ends the run failed with its reason.
const (
	// MaxMessage bounds one JSON-RPC message. The largest legitimate one
	// is an item/completed of a computer_act or computer_observe call: it
	// echoes the screenshot the worker sent as base64. Measured through a
	// real botd (TestHostileMachineFlood logs it): the 1280x800 desktop
	// is a 30 KB data URL, a page of random pixels (the worst a JPEG q72
	// gets) 690 KB. 4 MiB leaves room for that on a larger screen.
	MaxMessage = 4 << 20
	// MaxMethod bounds a JSON-RPC method name (Codex's longest is 40 bytes).
	MaxMethod = 128
	// MaxID bounds a JSON-RPC id (Codex's are small integers).
	MaxID = 128
	// MaxInflight bounds the server requests (tool calls, approvals) that
	// wait for an answer at once; Codex makes a few in parallel at most.
	MaxInflight = 32
	// maxDrain is how much of an oversized message is read (and dropped)
	// to say its size; past it the size is "more than" this.
	maxDrain = 64 << 20
	// drainTime bounds that reading.
	drainTime = 10 * time.Second
)

// LimitError is a cap the computer exceeded; its text is the run's reason.
type LimitError struct{ msg string }

func (e *LimitError) Error() string { return e.msg }

// Limitf makes a LimitError.
func Limitf(format string, args ...any) *LimitError {
	return &LimitError{msg: fmt.Sprintf(format, args...)}
}

// AsLimit returns the LimitError in err's chain, if there is one.
func AsLimit(err error) (*LimitError, bool) {
	var le *LimitError
	ok := errors.As(err, &le)
	return le, ok
}

// Size says n bytes the way a person reads it: "16 MiB", "1.5 MiB",
// "300 KiB", "128 bytes".
func Size(n int64) string {
	trim := func(v float64, unit string) string {
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0") + " " + unit
	}
	switch {
	case n >= 1<<30:
		return trim(float64(n)/(1<<30), "GiB")
	case n >= 1<<20:
		return trim(float64(n)/(1<<20), "MiB")
	case n >= 1<<10:
		return trim(float64(n)/(1<<10), "KiB")
	}
	return fmt.Sprintf("%d bytes", n)
}

// Truncated marks text cut at a cap.
const Truncated = "…[truncated]"

// Clip returns s cut to at most max bytes (at a character boundary) and
// marked with Truncated when it was longer.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return ClipBytes(s, max) + Truncated
}

// ClipBytes returns s cut to at most max bytes at a character boundary,
// unmarked.
func ClipBytes(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
