package main

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/open-bot/computer/apps/worker/internal/responses"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// DefaultModelURL is the Responses API the worker runtime calls when
// MODEL_UPSTREAM_URL is not set (Codex's own default upstream).
const DefaultModelURL = "https://api.openai.com/v1"

// workerModel is the worker runtime's model client and bounds, from the
// same settings machines get (MODEL_UPSTREAM_URL, MODEL_API_KEY or
// MODEL_API_KEY_FILE) and WORKER_RUN_MAX_STEPS, WORKER_RUN_TOKEN_BUDGET,
// WORKER_RUN_KEEP_SCREENSHOTS. The key stays in this process.
func workerModel(getenv func(string) string) (*responses.Client, runs.LoopLimits, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var lim runs.LoopLimits
	base := strings.TrimSpace(getenv("MODEL_UPSTREAM_URL"))
	if base == "" {
		base = DefaultModelURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, lim, fmt.Errorf("MODEL_UPSTREAM_URL: want an http(s) URL without credentials")
	}
	key := strings.TrimSpace(getenv("MODEL_API_KEY"))
	if key == "" {
		if f := strings.TrimSpace(getenv("MODEL_API_KEY_FILE")); f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, lim, fmt.Errorf("MODEL_API_KEY_FILE: %w", err)
			}
			key = strings.TrimSpace(string(b))
		}
	}
	num := func(k string, set func(int64)) error {
		v := strings.TrimSpace(getenv(k))
		if v == "" {
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("%s: want a positive integer, got %q", k, v)
		}
		set(n)
		return nil
	}
	for _, e := range []error{
		num("WORKER_RUN_MAX_STEPS", func(n int64) { lim.MaxSteps = int(n) }),
		num("WORKER_RUN_TOKEN_BUDGET", func(n int64) { lim.TokenBudget = n }),
		num("WORKER_RUN_KEEP_SCREENSHOTS", func(n int64) { lim.KeepScreenshots = int(n) }),
	} {
		if e != nil {
			return nil, lim, e
		}
	}
	return &responses.Client{BaseURL: base, Key: key}, lim, nil
}
