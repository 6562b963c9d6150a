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
	script := flag.String("script", "acceptance", "the model's script: acceptance, or takeover (wait for bots/BOT/go, request_takeover, observe)")
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
	switch *script {
	case "acceptance":
	case "takeover":
		model = mockmodel.New(takeoverScript(*bot)).RequireKey(string(key))
	default:
		log.Fatalf("mockserve: -script %q: want acceptance or takeover", *script)
	}
	go func() {
		log.Fatal((&http.Server{Addr: *pageAddr, Handler: page, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
	}()
	log.Fatal((&http.Server{Addr: *modelAddr, Handler: model, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
}

// takeoverScript keeps the bot busy until bots/BOT/go exists (a shell that
// waits for it, up to two minutes), then asks a person to take the screen
// and looks at it again once it has it back.
func takeoverScript(bot string) mockmodel.Script {
	path := "bots/" + bot + "/go"
	steps := []mockmodel.Step{
		{Tool: "shell", Args: map[string]any{"argv": []string{"sh", "-c",
			"i=0; while [ ! -e " + path + " ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; echo waited"}, "timeoutMs": 180000}},
		{Tool: "request_takeover", Args: map[string]any{"reason": "please sign in for me"}},
		{Tool: "computer_observe", Args: map[string]any{}},
	}
	return func(outs []mockmodel.Output) mockmodel.Step {
		if len(outs) < len(steps) {
			return steps[len(outs)]
		}
		return mockmodel.Step{Message: "done"}
	}
}
