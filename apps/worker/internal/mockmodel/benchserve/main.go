// Command benchserve runs the benchmarks' scripted model inside a machine
// the benchmark cannot reach from outside (a Docker container: only
// loopback inside it), where Codex in the machine calls it: each run it
// asks for the shell tool with `true` -calls times, then answers "done".
// Benchmarks only; every exchange with its times (mockmodel.Exchange) is
// appended to -exchanges as a JSON line, for `docker exec cat`. The
// container shares the host's clock, so the times compare with the
// benchmark's own.
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
)

func main() {
	addr := flag.String("model", "127.0.0.1:18080", "listen address")
	keyFile := flag.String("key-file", "", "file holding the API key the model requires")
	calls := flag.Int("calls", 4, "shell `true` calls per run")
	exchanges := flag.String("exchanges", "/tmp/benchserve/exchanges", "file the exchanges are appended to (its directory is made)")
	flag.Parse()
	key, err := os.ReadFile(*keyFile)
	if err != nil || len(key) == 0 {
		log.Fatalf("benchserve: -key-file: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(*exchanges), 0o755); err != nil {
		log.Fatal(err)
	}
	var mu sync.Mutex
	model := mockmodel.New(mockmodel.ToolLoop("shell", map[string]any{"argv": []string{"true"}}, *calls)).RequireKey(string(key))
	model.OnExchange(func(ex mockmodel.Exchange) {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.Marshal(ex)
		f, err := os.OpenFile(*exchanges, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			log.Printf("benchserve: %v", err)
			return
		}
		defer f.Close()
		_, _ = f.Write(append(b, '\n'))
	})
	log.Fatal((&http.Server{Addr: *addr, Handler: model, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
}
