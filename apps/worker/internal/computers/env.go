package computers

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// IdleFromEnv reads COMPUTER_IDLE_MINUTES (default 30; 0 never suspends):
// how long a computer nobody uses runs before it is suspended.
func IdleFromEnv(getenv func(string) string) (time.Duration, error) {
	v := strings.TrimSpace(getenv("COMPUTER_IDLE_MINUTES"))
	if v == "" {
		return 30 * time.Minute, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("COMPUTER_IDLE_MINUTES: want a whole number of minutes (0: never), got %q", v)
	}
	return time.Duration(n) * time.Minute, nil
}
