package browser

import "time"

// SetCDPWriteTimeoutForTest replaces the bound of one write to a CDP
// client until the returned restore is called.
func SetCDPWriteTimeoutForTest(d time.Duration) (restore func()) {
	cdpWriteTimeoutSet.Store(int64(d))
	return func() { cdpWriteTimeoutSet.Store(0) }
}
