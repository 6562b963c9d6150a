package browser

import "time"

// SetCDPWriteTimeoutForTest replaces the bound of one write to a CDP
// client until the returned restore is called.
func SetCDPWriteTimeoutForTest(d time.Duration) (restore func()) {
	cdpWriteTimeoutSet.Store(int64(d))
	return func() { cdpWriteTimeoutSet.Store(0) }
}

// SetCDPTapBytesForTest replaces the tap's queue bound in bytes for CDP
// sessions opened until the returned restore is called.
func SetCDPTapBytesForTest(n int) (restore func()) {
	cdpTapBytesSet.Store(int64(n))
	return func() { cdpTapBytesSet.Store(0) }
}
