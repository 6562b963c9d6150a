package vendorkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"
)

// Retry is a vendor API client's retry policy: after a 429/5xx or no answer
// at all, up to Retries more attempts, waiting Backoff first (doubled each
// time, capped at MaxBackoff, jittered; a Retry-After the API sends wins up
// to the cap). Sleep waits d or until ctx ends (tests shorten it).
type Retry struct {
	Retries    int
	Backoff    time.Duration
	MaxBackoff time.Duration
	Sleep      func(ctx context.Context, d time.Duration) error
}

// SleepCtx waits d or until ctx ends.
func SleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Retryable: a 429 and the 5xx a busy or restarting API answers.
func Retryable(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusBadGateway ||
		status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout ||
		status == http.StatusInternalServerError
}

// Do runs once until it succeeds or the policy gives up, and returns the
// last attempt's status and error. once returns the answer's status, the
// Retry-After it asked for (0: none) and an error; statusOf says whether an
// error is an answer of the API (and its status) rather than no answer.
//
// idempotent says whether any 5xx, or no answer, may be sent again: a
// create that answered 500/502/504, or none, may have made a sandbox, so
// only a 429 or a 503 (refused before any work: rate limit, no capacity)
// is retried for it. what names the call in a wait's error ("e2b: create
// sandbox").
func (p Retry) Do(ctx context.Context, what string, idempotent bool,
	statusOf func(error) (int, bool), once func() (int, time.Duration, error)) (int, error) {
	wait := p.Backoff
	for attempt := 0; ; attempt++ {
		status, retryAfter, err := once()
		again := false
		if err == nil {
			return status, nil
		}
		if ctx.Err() != nil {
			return status, err
		}
		if st, ok := statusOf(err); ok {
			again = st == http.StatusTooManyRequests || st == http.StatusServiceUnavailable ||
				(idempotent && Retryable(st))
		} else {
			again = idempotent
		}
		if !again || attempt >= p.Retries {
			if again {
				return status, fmt.Errorf("%w (gave up after %d attempts)", err, attempt+1)
			}
			return status, err
		}
		d := wait/2 + rand.N(wait/2+1)
		if retryAfter > 0 {
			d = retryAfter
		}
		d = min(d, p.MaxBackoff)
		sleep := p.Sleep
		if sleep == nil {
			sleep = SleepCtx
		}
		if err := sleep(ctx, d); err != nil {
			return status, fmt.Errorf("%s: %w", what, err)
		}
		wait = min(2*wait, p.MaxBackoff)
	}
}
