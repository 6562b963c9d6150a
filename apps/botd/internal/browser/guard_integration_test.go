package browser_test

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/browser"
	"github.com/open-bot/computer/apps/botd/internal/browser/browsertest"
)

func TestApplyGuardRealChromium(t *testing.T) {
	u := browsertest.Require(t)
	x := browsertest.StartX(t, u)
	s := newSite(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<title>job</title><body>job posting</body>`)
	}))
	socks := browsertest.StartSocks(t, s.addr())
	var holds atomic.Bool
	// mu guards events.
	var mu sync.Mutex
	var events []browser.Blocked
	o := x.Options(t, "guard")
	o.SocksAddr = socks.Addr
	o.UserHolds = holds.Load
	o.OnBlocked = func(b browser.Blocked) {
		mu.Lock()
		events = append(events, b)
		mu.Unlock()
	}
	b := browsertest.Launch(t, o)
	ctx := browsertest.Ctx(t, 60*time.Second)

	if _, err := b.Open(ctx, "http://www.linkedin.com/jobs/view/1", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "posting", func() bool { return s.saw("GET www.linkedin.com/jobs/view/1") })
	waitFor(t, 10*time.Second, "page ready", func() bool {
		p, err := b.ReadPage(ctx)
		return err == nil && p.Title == "job"
	})
	run := func(js string) {
		t.Helper()
		if err := b.EvalFront(ctx, js); err != nil {
			t.Fatal(err)
		}
	}
	// A read of an apply URL passes; a submission does not reach the server.
	run(`fetch("/jobs/1/apply?step=1").catch(() => {}); fetch("/jobs/1/Apply", {method: "POST", body: "cv"}).catch(() => {}); 1`)
	waitFor(t, 10*time.Second, "GET apply", func() bool { return s.saw("GET www.linkedin.com/jobs/1/apply?step=1") })
	waitFor(t, 10*time.Second, "block event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) == 1
	})
	// A request the page sends after the blocked one reaches the server
	// first: had the POST slipped through, it would be there by then.
	run(`fetch("/jobs/after-the-block").catch(() => {}); 1`)
	waitFor(t, 30*time.Second, "a later request", func() bool { return s.saw("GET www.linkedin.com/jobs/after-the-block") })
	if s.saw("POST www.linkedin.com/jobs/1/Apply") {
		t.Fatal("the application reached the server")
	}
	blocked := b.TakeBlocked()
	if len(blocked) != 1 || blocked[0].Method != "POST" || blocked[0].URL != "http://www.linkedin.com/jobs/1/Apply" || blocked[0].Screen != "guard" {
		t.Fatalf("blocked %+v", blocked)
	}
	if again := b.TakeBlocked(); len(again) != 0 {
		t.Fatalf("blocks reported twice: %+v", again)
	}
	// A form submission (a navigation) is stopped too.
	run(`const f = document.createElement("form"); f.method = "post"; f.action = "/jobs/3/easyApply"; document.body.append(f); f.submit(); 1`)
	waitFor(t, 10*time.Second, "form block", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) == 2
	})
	if s.saw("POST www.linkedin.com/jobs/3/easyApply") {
		t.Fatal("the form submission reached the server")
	}
	if got := b.TakeBlocked(); len(got) != 1 || got[0].URL != "http://www.linkedin.com/jobs/3/easyApply" {
		t.Fatalf("form block %+v", got)
	}
	if _, err := b.Open(ctx, "http://www.linkedin.com/jobs/view/1", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "page ready again", func() bool {
		p, err := b.ReadPage(ctx)
		return err == nil && p.Title == "job"
	})

	// A POST elsewhere that mentions apply passes.
	run(`fetch("http://www.example.org/apply", {method: "POST", body: "x"}).catch(() => {}); 1`)
	waitFor(t, 10*time.Second, "POST to an unguarded host", func() bool { return s.saw("POST www.example.org/apply") })

	// With a person holding the screen, everything passes.
	holds.Store(true)
	run(`fetch("/jobs/2/APPLY", {method: "POST", body: "cv"}).catch(() => {}); 1`)
	waitFor(t, 10*time.Second, "POST with a user lease", func() bool { return s.saw("POST www.linkedin.com/jobs/2/APPLY") })
	if got := b.TakeBlocked(); len(got) != 0 {
		t.Fatalf("blocked while a user holds the screen: %+v", got)
	}
}
