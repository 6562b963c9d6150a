package supervisor

import "time"

// The restart policy of the design: 500 ms doubling to 15 s, reset once a
// process has stayed up for a minute.
const (
	BackoffInitial = 500 * time.Millisecond
	BackoffMax     = 15 * time.Second
	BackoffReset   = 60 * time.Second
	// StopGrace is how long a group gets between SIGTERM and SIGKILL.
	StopGrace = 3 * time.Second
)

// nextBackoff is the delay before the next restart, given the previous delay
// (0 for none yet) and how long the process stayed up this time.
func nextBackoff(prev, up time.Duration) time.Duration {
	if prev == 0 || up >= BackoffReset {
		return BackoffInitial
	}
	next := prev * 2
	if next > BackoffMax {
		next = BackoffMax
	}
	return next
}
