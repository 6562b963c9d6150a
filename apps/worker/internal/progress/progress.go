// Package progress shows long work in the CLI: on a terminal one line,
// redrawn in place (phase, bytes, rate, elapsed; steps as "n/N name");
// elsewhere plain lines, one per phase change and at most one per Interval
// in between, never a carriage return.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Printer shows one piece of long work. Its methods are safe for
// concurrent use (a ticker and the caller).
type Printer struct {
	// Interval is the least time between two plain lines of one phase
	// (default 5 s).
	Interval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	w        io.Writer
	terminal bool

	mu         sync.Mutex
	phase      string
	started    time.Time // of the phase
	done, size int64     // bytes so far, of size (0: unknown)
	hasBytes   bool
	lastPlain  time.Time
	drawn      bool // a terminal line is showing
}

// New is a Printer writing to w; terminal says whether w is a terminal
// (IsTerminal of its file).
func New(w io.Writer, terminal bool) *Printer {
	return &Printer{Interval: 5 * time.Second, Now: time.Now, w: w, terminal: terminal}
}

// For is a Printer on f, in terminal mode when f is a terminal.
func For(f *os.File) *Printer { return New(f, IsTerminal(f)) }

// Phase starts a new phase: its clock and bytes start again.
func (p *Printer) Phase(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase, p.started = name, p.Now()
	p.done, p.size, p.hasBytes = 0, 0, false
	p.show(true)
}

// Step is a phase that is step n of total.
func (p *Printer) Step(n, total int, name string) {
	p.Phase(fmt.Sprintf("%d/%d %s", n, total, name))
}

// Bytes reports the phase's bytes so far, of size (0 when unknown).
func (p *Printer) Bytes(done, size int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.size, p.hasBytes = done, size, true
	p.show(false)
}

// Tick redraws the line (the elapsed time moves); in plain mode it prints
// a line when Interval has passed since the last one.
func (p *Printer) Tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.phase != "" {
		p.show(false)
	}
}

// Every ticks every d until stop is called.
func (p *Printer) Every(d time.Duration) (stop func()) {
	t := time.NewTicker(d)
	quit := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-t.C:
				p.Tick()
			case <-quit:
				return
			}
		}
	}()
	return func() {
		once.Do(func() { t.Stop(); close(quit); wg.Wait() })
	}
}

// Done ends the work with a line of its own (the terminal line is
// replaced by it).
func (p *Printer) Done(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if p.terminal && p.drawn {
		fmt.Fprintf(p.w, "\r\x1b[K%s\n", msg)
	} else {
		fmt.Fprintln(p.w, msg)
	}
	p.drawn, p.phase = false, ""
}

// Elapsed is the time since the phase started.
func (p *Printer) Elapsed() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Now().Sub(p.started)
}

// show draws the line (terminal) or prints it (plain: on a phase change,
// else when Interval has passed). Called with mu held.
func (p *Printer) show(change bool) {
	now := p.Now()
	line := p.line(now)
	if p.terminal {
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
		p.drawn = true
		return
	}
	if !change && now.Sub(p.lastPlain) < p.Interval {
		return
	}
	p.lastPlain = now
	fmt.Fprintln(p.w, line)
}

func (p *Printer) line(now time.Time) string {
	el := now.Sub(p.started)
	parts := []string{p.phase}
	if p.hasBytes {
		b := Size(p.done)
		if p.size > 0 {
			b += " of " + Size(p.size)
		}
		parts = append(parts, b)
		if el > 0 {
			parts = append(parts, Rate(p.done, el))
		}
	}
	parts = append(parts, Duration(el))
	return strings.Join(parts, " · ")
}

// Size is n bytes for people: 512 B, 1.5 kB, 12.3 MB, 2.0 GB.
func Size(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, u := float64(n), 0
	for f >= unit && u < 4 {
		f /= unit
		u++
	}
	return fmt.Sprintf("%.1f %cB", f, " kMGT"[u])
}

// Rate is n bytes over d, per second.
func Rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "- B/s"
	}
	return Size(int64(float64(n)/d.Seconds())) + "/s"
}

// Duration is d rounded for people: 850ms, 4.2s, 1m05s.
func Duration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}
