package browser_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-bot/computer/apps/botd/internal/browser"
	"github.com/open-bot/computer/apps/botd/internal/browser/browsertest"
)

// A screen browser's request to a loopback page goes through botd's SOCKS
// proxy like any other (--proxy-bypass-list=<-loopback>): the proxy sees
// the target, and the loopback listener itself is never reached directly.
func TestLoopbackPagesDoNotBypassTheProxy(t *testing.T) {
	u := browsertest.Require(t)
	x := browsertest.StartX(t, u)
	s := newSite(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<title>via the proxy</title><body>served by the proxy's backend</body>`)
	}))
	trap, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer trap.Close()
	var direct atomic.Int32
	go func() {
		for {
			c, err := trap.Accept()
			if err != nil {
				return
			}
			direct.Add(1)
			c.Close()
		}
	}()
	socks := browsertest.StartSocks(t, s.addr())
	o := x.Options(t, "loopback")
	o.SocksAddr = socks.Addr
	b := browsertest.Launch(t, o)
	ctx := browsertest.Ctx(t, 60*time.Second)

	target := "http://" + trap.Addr().String() + "/"
	if _, err := b.Open(ctx, target, false); err != nil {
		t.Fatal(err)
	}
	var p browser.Page
	waitFor(t, 20*time.Second, "the loopback page", func() bool {
		p, err = b.ReadPage(ctx)
		return err == nil && p.Title == "via the proxy"
	})
	if !contains(socks.Hosts(), trap.Addr().String()) {
		t.Fatalf("the proxy never saw %s: %v", trap.Addr(), socks.Hosts())
	}
	if n := direct.Load(); n != 0 {
		t.Fatalf("the browser connected to the loopback page directly %d times", n)
	}
	if !strings.HasPrefix(p.URL, target) {
		t.Fatalf("page %+v", p)
	}
}
