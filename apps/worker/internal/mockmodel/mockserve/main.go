// Command mockserve runs the acceptance flow's scripted model and button
// page inside a machine the test cannot reach from outside (a Docker
// container: only loopback inside it, never the bridge network). Tests
// only; it records clicks, misses, cookies and what the model saw ("model")
// under -state for `docker exec cat`.
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
	modelAddr := flag.String("model", "127.0.0.1:18080", "scripted model listen address")
	pageAddr := flag.String("page", "127.0.0.1:18081", "button page listen address")
	keyFile := flag.String("key-file", "", "file holding the API key the model requires")
	cookie := flag.String("cookie", "", "sign-in cookie value the page sets")
	bot := flag.String("bot", "alice", "the bot the script writes files for")
	state := flag.String("state", "/tmp/mockserve", "directory for clicks, misses, seen cookies and the model's report")
	flag.Parse()
	key, err := os.ReadFile(*keyFile)
	if err != nil || len(key) == 0 {
		log.Fatalf("mockserve: -key-file: %v", err)
	}
	if err := os.MkdirAll(*state, 0o755); err != nil {
		log.Fatal(err)
	}
	page := mockmodel.NewButtonPage() // the button at a random place
	page.Cookie, page.StateDir = *cookie, *state
	flow := mockmodel.NewAcceptance("http://"+*pageAddr+"/", *bot)
	flow.OnReport = func(r mockmodel.AcceptanceReport) { mockmodel.WriteReport(*state, r) }
	model := mockmodel.New(flow.Script).RequireKey(string(key))
	go func() {
		log.Fatal((&http.Server{Addr: *pageAddr, Handler: page, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
	}()
	log.Fatal((&http.Server{Addr: *modelAddr, Handler: model, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
}
