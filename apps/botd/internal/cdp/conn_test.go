package cdp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/browser"
	cdpapi "github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
)

// fakeBrowser is the other end of a pipe pair: it reads our NUL-framed
// commands and writes whatever the test tells it to.
type fakeBrowser struct {
	t   *testing.T
	in  *bufio.Reader
	inF *os.File
	out *os.File
	// mu guards out, so the test and helpers never interleave writes.
	mu sync.Mutex
}

func newFake(t *testing.T, o Options) (*Conn, *fakeBrowser) {
	t.Helper()
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c := New(cmdW, evR, o)
	f := &fakeBrowser{t: t, in: bufio.NewReader(cmdR), inF: cmdR, out: evW}
	t.Cleanup(func() {
		_ = c.Close()
		_ = cmdR.Close()
		_ = evW.Close()
	})
	return c, f
}

func (f *fakeBrowser) next() cdproto.Message {
	f.t.Helper()
	b, err := f.in.ReadBytes(0)
	if err != nil {
		f.t.Fatalf("fake browser read: %v", err)
	}
	var m cdproto.Message
	if err := jsonv2.Unmarshal(b[:len(b)-1], &m); err != nil {
		f.t.Fatalf("fake browser decode %q: %v", b, err)
	}
	return m
}

func (f *fakeBrowser) send(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.out.Write(append([]byte(s), 0)); err != nil {
		f.t.Errorf("fake browser write: %v", err)
	}
}

// sendPieces writes one message in 64 KiB pieces, as Chromium does.
func (f *fakeBrowser) sendPieces(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := append([]byte(s), 0)
	for len(b) > 0 {
		n := min(len(b), 64<<10)
		if _, err := f.out.Write(b[:n]); err != nil {
			f.t.Errorf("fake browser write: %v", err)
			return
		}
		b = b[n:]
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func checkNoLeak(t *testing.T) {
	before := goruntime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if goruntime.NumGoroutine() <= before {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		buf := make([]byte, 1<<16)
		n := goruntime.Stack(buf, true)
		t.Errorf("goroutines leaked: %d before, %d after\n%s", before, goruntime.NumGoroutine(), buf[:n])
	})
}

func TestCallTypedResult(t *testing.T) {
	checkNoLeak(t)
	c, f := newFake(t, Options{})
	go func() {
		m := f.next()
		if m.Method != "Browser.getVersion" || m.SessionID != "" {
			t.Errorf("got %+v", m)
		}
		f.send(fmt.Sprintf(`{"id":%d,"result":{"product":"Chrome/156","protocolVersion":"1.3"}}`, m.ID))
	}()
	res, err := cdpapi.Call(ctxT(t), c.Browser(), browser.GetVersion, cdpapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Product != "Chrome/156" {
		t.Fatalf("product %q", res.Product)
	}
}

func TestCallBrowserError(t *testing.T) {
	c, f := newFake(t, Options{})
	go func() {
		m := f.next()
		f.send(fmt.Sprintf(`{"id":%d,"error":{"code":-32000,"message":"No target with given id"}}`, m.ID))
	}()
	_, err := cdpapi.Call(ctxT(t), c.Browser(), target.ActivateTarget, target.ActivateTargetParams{TargetID: "x"})
	var ce *cdproto.Error
	if !errors.As(err, &ce) || ce.Code != -32000 {
		t.Fatalf("want cdproto.Error, got %v", err)
	}
}

func TestDecodeFailureResolvesCall(t *testing.T) {
	c, f := newFake(t, Options{CallTimeout: 5 * time.Second})
	go func() {
		// A result of the wrong shape: the call must fail at once, not time out.
		m := f.next()
		f.send(fmt.Sprintf(`{"id":%d,"result":{"product":5}}`, m.ID))
		// An envelope that does not decode at all, but whose id is readable.
		m = f.next()
		f.send(fmt.Sprintf(`{"id":%d,"result":{"product":"x"`, m.ID))
	}()
	// A call whose answer does not decode fails with that, at once: left
	// waiting, it would end with ctxT's deadline instead.
	_, err := cdpapi.Call(ctxT(t), c.Browser(), browser.GetVersion, cdpapi.Empty{})
	if err == nil || !strings.Contains(err.Error(), "decode") {
		t.Fatalf("want decode error, got %v", err)
	}
	_, err = cdpapi.Call(ctxT(t), c.Browser(), browser.GetVersion, cdpapi.Empty{})
	if err == nil || !strings.Contains(err.Error(), "decode") {
		t.Fatalf("want decode error for broken envelope, got %v", err)
	}
}

func TestLoneSurrogatesDecode(t *testing.T) {
	c, f := newFake(t, Options{})
	s := c.Session("S1")
	evs := cdpapi.Events(ctxT(t), s, page.FrameNavigated)
	go func() {
		m := f.next()
		f.send(fmt.Sprintf(`{"id":%d,"sessionId":"S1","result":{"result":{"type":"string","value":"a\ud800b"}}}`, m.ID))
		f.send("{\"method\":\"Page.frameNavigated\",\"sessionId\":\"S1\",\"params\":{\"frame\":{\"id\":\"F\",\"url\":\"http://x/\",\"name\":\"x\\udc00\xff\"},\"type\":\"Navigation\"}}")
	}()
	res, err := cdpapi.Call(ctxT(t), s, runtime.Evaluate, runtime.EvaluateParams{Expression: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var v string
	if err := jsonv2.Unmarshal(res.Result.Value, &v, DecodeOptions()); err != nil {
		t.Fatal(err)
	}
	if v != "a\uFFFDb" {
		t.Fatalf("value %q", v)
	}
	for ev, err := range evs {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Frame.Name != "x\uFFFD\uFFFD" {
			t.Fatalf("name %q", ev.Frame.Name)
		}
		break
	}
}

func TestCallTimeout(t *testing.T) {
	c, f := newFake(t, Options{CallTimeout: 100 * time.Millisecond})
	go f.next() // read, never answer
	// The call has no deadline of its own: only CallTimeout can end it (the
	// 30 s here is a liveness bound, not a speed figure).
	errc := make(chan error, 1)
	go func() {
		_, err := cdpapi.Call(context.Background(), c.Browser(), browser.GetVersion, cdpapi.Empty{})
		errc <- err
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want deadline, got %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("CallTimeout (100 ms) did not end the call")
	}
	c.mu.Lock()
	n := len(c.pending)
	c.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d pending calls left after timeout", n)
	}
}

func TestEventsPerSessionAndReaderNeverBlocks(t *testing.T) {
	checkNoLeak(t)
	c, f := newFake(t, Options{})
	ctx := ctxT(t)
	a := c.Session("A")
	// A subscriber that never reads must not stall the reader.
	_, cancelIdle := a.Subscribe("Page.loadEventFired")
	defer cancelIdle()
	evs := cdpapi.Events(ctx, a, page.LoadEventFired)
	for i := range 2000 {
		sess := "A"
		if i%2 == 1 {
			sess = "B"
		}
		f.send(fmt.Sprintf(`{"method":"Page.loadEventFired","sessionId":%q,"params":{"timestamp":%d}}`, sess, i))
	}
	go func() {
		m := f.next()
		f.send(fmt.Sprintf(`{"id":%d,"result":{"product":"p"}}`, m.ID))
	}()
	if _, err := cdpapi.Call(ctx, c.Browser(), browser.GetVersion, cdpapi.Empty{}); err != nil {
		t.Fatalf("call behind 2000 unread events: %v", err)
	}
	n := 0
	for ev, err := range evs {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Timestamp.Float64() != float64(n*2) {
			t.Fatalf("event %d out of order: %v", n, ev.Timestamp)
		}
		n++
		if n == 1000 {
			break
		}
	}
}

func TestAttachFlatten(t *testing.T) {
	c, f := newFake(t, Options{})
	attached := cdpapi.Events(ctxT(t), c.Browser(), target.AttachedToTarget)
	go func() {
		m := f.next()
		var p target.AttachToTargetParams
		_ = jsonv2.Unmarshal(m.Params, &p)
		if m.Method != "Target.attachToTarget" || p.Flatten == nil || !*p.Flatten || p.TargetID != "T1" {
			t.Errorf("attach sent %s %s", m.Method, m.Params)
		}
		// Chromium sends attachedToTarget before the reply.
		f.send(`{"method":"Target.attachedToTarget","params":{"sessionId":"S9","targetInfo":{"targetId":"T1","type":"page","title":"","url":"about:blank","attached":true,"canAccessOpener":false},"waitingForDebugger":false}}`)
		f.send(fmt.Sprintf(`{"id":%d,"result":{"sessionId":"S9"}}`, m.ID))
		m = f.next()
		if m.SessionID != "S9" || m.Method != "Page.enable" {
			t.Errorf("session call sent %+v", m)
		}
		f.send(fmt.Sprintf(`{"id":%d,"sessionId":"S9","result":{}}`, m.ID))
	}()
	s, err := c.Attach(ctxT(t), "T1")
	if err != nil {
		t.Fatal(err)
	}
	if s.ID() != "S9" {
		t.Fatalf("session %q", s.ID())
	}
	if _, err := cdpapi.Call(ctxT(t), s, page.Enable, page.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	for ev, err := range attached {
		if err != nil || ev.SessionID != "S9" {
			t.Fatalf("attached event %v %v", ev, err)
		}
		break
	}
}

func TestLargeMessageInPieces(t *testing.T) {
	c, f := newFake(t, Options{})
	big := strings.Repeat("é", 600_000)
	go func() {
		m := f.next()
		f.sendPieces(fmt.Sprintf(`{"id":%d,"result":{"result":{"type":"string","value":%q}}}`, m.ID, big))
	}()
	res, err := cdpapi.Call(ctxT(t), c.Browser(), runtime.Evaluate, runtime.EvaluateParams{Expression: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var v string
	_ = jsonv2.Unmarshal(res.Result.Value, &v)
	if v != big {
		t.Fatalf("got %d bytes", len(v))
	}
}

func TestBrowserExitFailsCallsAndEndsEvents(t *testing.T) {
	checkNoLeak(t)
	c, f := newFake(t, Options{})
	ctx := ctxT(t)
	evs := cdpapi.Events(ctx, c.Browser(), target.TargetCreated)
	errc := make(chan error, 1)
	go func() {
		_, err := cdpapi.Call(ctx, c.Browser(), browser.GetVersion, cdpapi.Empty{})
		errc <- err
	}()
	f.next()
	_ = f.out.Close() // the browser exits
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("pending call: %v", err)
	}
	for range evs {
		t.Fatal("event after close")
	}
	<-c.Done()
	if _, err := cdpapi.Call(ctx, c.Browser(), browser.GetVersion, cdpapi.Empty{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after close: %v", err)
	}
}

func TestDetachFailsSessionCalls(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := ctxT(t)
	s := c.Session("S1")
	evs := cdpapi.Events(ctx, s, page.LoadEventFired)
	errc := make(chan error, 1)
	go func() {
		_, err := cdpapi.Call(ctx, s, page.Reload, page.ReloadParams{})
		errc <- err
	}()
	f.next()
	f.send(`{"method":"Target.detachedFromTarget","params":{"sessionId":"S1","targetId":"T1"}}`)
	if err := <-errc; !errors.Is(err, ErrDetached) {
		t.Fatalf("want detached, got %v", err)
	}
	for range evs {
		t.Fatal("event after detach")
	}
	if _, err := cdpapi.Call(ctx, s, page.Reload, page.ReloadParams{}); !errors.Is(err, ErrDetached) {
		t.Fatalf("call on detached session: %v", err)
	}
}

func TestCloseTwice(t *testing.T) {
	c, _ := newFake(t, Options{})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
