package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/open-bot/computer/apps/worker/internal/homes"
)

// homeLimits reads the checkpoint limits (README, Configuration):
//
//	COMPUTER_HOME_MAX_BYTES        a checkpoint's largest tar (default
//	                               10 GiB; at most what botd's import
//	                               accepts, 50 GiB)
//	COMPUTER_HOME_MIN_FREE_BYTES   free space a checkpoint leaves on the
//	                               disk of DATA_DIR/homes (default 1 GiB)
func homeLimits(c serveConfig) (maxBytes, minFree int64, err error) {
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	maxBytes, minFree = homes.DefaultMaxBytes, homes.DefaultMinFree
	if v := strings.TrimSpace(getenv("COMPUTER_HOME_MAX_BYTES")); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("COMPUTER_HOME_MAX_BYTES=%q: a number of bytes", v)
		}
		if err := homes.ValidMaxBytes(n); err != nil {
			return 0, 0, fmt.Errorf("COMPUTER_HOME_MAX_BYTES: %w", err)
		}
		maxBytes = n
	}
	if v := strings.TrimSpace(getenv("COMPUTER_HOME_MIN_FREE_BYTES")); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 0 {
			return 0, 0, fmt.Errorf("COMPUTER_HOME_MIN_FREE_BYTES=%q: a number of bytes, 0 or more", v)
		}
		minFree = n
	}
	return maxBytes, minFree, nil
}
