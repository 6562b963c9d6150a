package progress

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/require"
)

// clock is a hand-moved clock: no test here waits on real time.
type clock struct{ t time.Time }

func (c *clock) now() time.Time               { return c.t }
func (c *clock) add(d time.Duration)          { c.t = c.t.Add(d) }
func newClock() *clock                        { return &clock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)} }
func withClock(p *Printer, c *clock) *Printer { p.Now = c.now; return p }

// TestPlainLines: not a terminal, a line per phase change and at most one
// per Interval in between, never a carriage return or an escape.
func TestPlainLines(t *testing.T) {
	var buf bytes.Buffer
	c := newClock()
	p := withClock(New(&buf, false), c)
	p.Phase("checkpointing c_1")
	c.add(time.Second)
	p.Tick() // too soon after the phase's line
	c.add(4 * time.Second)
	p.Tick() // 5 s: a line
	c.add(time.Second)
	p.Tick() // too soon again
	c.add(time.Second)
	p.Step(2, 4, "restoring")
	c.add(time.Second)
	p.Bytes(3_000_000, 10_000_000) // too soon: no line
	c.add(4 * time.Second)
	p.Bytes(3_000_000, 10_000_000)
	p.Done("checkpoint 3 of c_1: %s", Size(10_000_000))

	out := buf.String()
	require.NotContains(t, out, "\r")
	require.NotContains(t, out, "\x1b")
	require.Equal(t, []string{
		"checkpointing c_1 · 0s",
		"checkpointing c_1 · 5.0s",
		"2/4 restoring · 0s",
		"2/4 restoring · 3.0 MB of 10.0 MB · 600.0 kB/s · 5.0s",
		"checkpoint 3 of c_1: 10.0 MB",
	}, strings.Split(strings.TrimSuffix(out, "\n"), "\n"))
}

// TestTerminalRedraws: on a terminal (a pty) the one line is redrawn in
// place, and Done replaces it with a line of its own.
func TestTerminalRedraws(t *testing.T) {
	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	defer ptmx.Close()
	defer tty.Close()
	require.True(t, IsTerminal(tty))

	got := make(chan string, 1)
	go func() {
		var all []byte
		b := make([]byte, 4096)
		for !bytes.Contains(all, []byte("finished")) || !bytes.HasSuffix(all, []byte("\n")) {
			n, err := ptmx.Read(b)
			all = append(all, b[:n]...)
			if err != nil {
				break
			}
		}
		got <- string(all)
	}()

	c := newClock()
	p := withClock(For(tty), c)
	p.Phase("waiting for c_1 to be running")
	c.add(2 * time.Second)
	p.Tick()
	c.add(time.Second)
	p.Bytes(1_500_000, 0)
	p.Done("finished")
	out := <-got

	// The terminal turns "\n" into "\r\n"; the redraws are the rest.
	require.Equal(t, "\r\x1b[Kwaiting for c_1 to be running · 0s"+
		"\r\x1b[Kwaiting for c_1 to be running · 2.0s"+
		"\r\x1b[Kwaiting for c_1 to be running · 1.5 MB · 500.0 kB/s · 3.0s"+
		"\r\x1b[Kfinished\r\n", out)
	require.Equal(t, 1, strings.Count(out, "\n"), "one line in all: %q", out)
}

// TestNotATerminal: a pipe is not a terminal, so For prints plain lines.
func TestNotATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	require.False(t, IsTerminal(w))
	p := For(w)
	p.Phase("creating")
	p.Done("done")
	w.Close()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NotContains(t, string(b), "\r")
	require.Regexp(t, `^creating · \S+\ndone\n$`, string(b))
}

func TestFormats(t *testing.T) {
	require.Equal(t, "512 B", Size(512))
	require.Equal(t, "1.5 kB", Size(1500))
	require.Equal(t, "2.0 GB", Size(2_000_000_000))
	require.Equal(t, "5.0 MB/s", Rate(10_000_000, 2*time.Second))
	require.Equal(t, "850ms", Duration(850*time.Millisecond))
	require.Equal(t, "1m05s", Duration(65*time.Second))
}
