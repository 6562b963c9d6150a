// Command pageserve serves the acceptance flow's button page alone inside a
// machine (a vendor desktop's sandbox), where the browser reaches it on
// loopback. Tests only. Unlike mockserve it runs no model and reads no key:
// with the worker runtime the scripted model runs in the test process,
// beside the worker, and the sandbox never holds the model key. It records
// clicks, misses and the cookies it saw under -state, for a probe to read.
package main

import (
	"flag"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
)

func main() {
	addr := flag.String("page", "127.0.0.1:18081", "button page listen address")
	cookie := flag.String("cookie", "", "sign-in cookie value the page sets")
	state := flag.String("state", "/tmp/mockserve", "directory for clicks, misses and seen cookies")
	flag.Parse()
	if err := os.MkdirAll(*state, 0o755); err != nil {
		log.Fatal(err)
	}
	page := mockmodel.NewButtonPage() // the button at a random place
	page.Cookie, page.StateDir = *cookie, *state
	log.Fatal((&http.Server{Addr: *addr, Handler: page, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
}
