package vendorkit

import (
	"sync"
	"sync/atomic"
	"time"
)

// Activity is what a provider's session counts as use of its sandbox
// besides botd's forwarder: the vendor calls it made (Used: exec, files,
// a desktop's observe and act) and operations in progress (Hold: a
// reconnect bringing botd up), so the provider's refresher keeps the
// sandbox from lapsing or being auto-stopped under them. The zero value is
// idle since the epoch.
type Activity struct {
	lastUse atomic.Int64 // unix nanos of the last Used
	holds   atomic.Int32
}

// Used records use now.
func (a *Activity) Used() { a.lastUse.Store(time.Now().UnixNano()) }

// Hold keeps the sandbox in use until the returned func is called (once;
// later calls do nothing).
func (a *Activity) Hold() (release func()) {
	a.holds.Add(1)
	a.Used()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.Used()
			a.holds.Add(-1)
		})
	}
}

// Active: something holds the sandbox, or it was used within idle of now.
func (a *Activity) Active(now time.Time, idle time.Duration) bool {
	return a.holds.Load() > 0 || now.Sub(time.Unix(0, a.lastUse.Load())) < idle
}
