// Command e2b-emulator serves E2B's control plane and envd on 127.0.0.1,
// each sandbox a container on the local Docker engine (see package
// internal/providers/e2b/emulator). Point clients at it with the variables
// the vendor's SDKs read:
//
//	E2B_API_URL=http://127.0.0.1:PORT        the control plane
//	E2B_SANDBOX_URL=http://127.0.0.1:PORT    envd and sandbox ports (by E2b-Sandbox-Id/-Port headers)
//	E2B_DOMAIN=e2b.localhost                 or hosts {port}-{sandboxID}.e2b.localhost, which
//	                                         resolve to 127.0.0.1 on most systems (*.localhost)
//	E2B_API_KEY=<the key this emulator accepts>
//
// The key comes from E2B_API_KEY or E2B_API_KEY_FILE; without either, one is
// made and written (0600) to -key-file, whose path is printed (never the key).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator"
)

type templateFlags map[string]emulator.Template

func (t templateFlags) String() string { return "" }

// Set parses name=image[,user=USER].
func (t templateFlags) Set(v string) error {
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" || rest == "" {
		return errors.New("want name=image[,user=USER]")
	}
	image, opts, _ := strings.Cut(rest, ",")
	tpl := emulator.Template{Image: image}
	if u, ok := strings.CutPrefix(opts, "user="); ok {
		tpl.User = u
	}
	t[name] = tpl
	return nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:3000", "address (loopback only)")
	domain := flag.String("domain", "e2b.localhost", "sandbox domain ({port}-{sandboxID}.DOMAIN)")
	keyFile := flag.String("key-file", "", "where to write a made API key when E2B_API_KEY(_FILE) is unset (default $TMPDIR/e2b-emulator-key)")
	ports := flag.String("ports", "", "container ports published on 127.0.0.1, comma-separated (default 7000,8080,6080-6099)")
	templates := templateFlags{}
	flag.Var(templates, "template", "template mapping name=image[,user=USER] (repeatable; default open-bot and base → open-bot/computer:dev, desktop → open-bot/desktop:dev)")
	flag.Parse()

	host, _, err := net.SplitHostPort(*listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		log.Fatalf("e2b-emulator: -listen %s: only a loopback address", *listen)
	}
	if len(templates) == 0 {
		templates["open-bot"] = emulator.Template{Image: "open-bot/computer:dev", User: "root"}
		templates["base"] = emulator.Template{Image: "open-bot/computer:dev", User: "root"}
		templates["desktop"] = emulator.Template{Image: "open-bot/desktop:dev", User: "user"}
	}
	var portList []int
	for _, p := range strings.Split(*ports, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(p, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a <= 0 || b < a || b > 65535 {
			log.Fatalf("e2b-emulator: -ports: bad %q", p)
		}
		for i := a; i <= b; i++ {
			portList = append(portList, i)
		}
	}
	key, err := apiKey(*keyFile)
	if err != nil {
		log.Fatalf("e2b-emulator: %v", err)
	}
	cli, err := dockerclient.New(dockerclient.FromEnv)
	if err != nil {
		log.Fatalf("e2b-emulator: docker: %v", err)
	}
	emu, err := emulator.New(emulator.Config{
		APIKey: key, Domain: *domain, Templates: templates, Ports: portList, Docker: cli,
		Logf: log.Printf,
	})
	if err != nil {
		log.Fatalf("e2b-emulator: %v", err)
	}
	srv := &http.Server{Addr: *listen, Handler: emu, ReadHeaderTimeout: 30 * time.Second}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true) // Connect's client streams need HTTP/2
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("e2b-emulator: %v", err)
	}
	log.Printf("e2b-emulator: listening on http://%s (E2B_API_URL and E2B_SANDBOX_URL), sandbox domain %s", ln.Addr(), *domain)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("e2b-emulator: %v", err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := emu.Close(cctx); err != nil {
		log.Printf("e2b-emulator: removing sandboxes: %v", err)
	}
}

func apiKey(keyFile string) (string, error) {
	if k := os.Getenv("E2B_API_KEY"); k != "" {
		return k, nil
	}
	if f := os.Getenv("E2B_API_KEY_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	if keyFile == "" {
		keyFile = os.TempDir() + "/e2b-emulator-key"
	}
	buf := make([]byte, 20)
	_, _ = rand.Read(buf)
	key := "e2b_" + hex.EncodeToString(buf)
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "e2b-emulator: API key written to %s (E2B_API_KEY_FILE)\n", keyFile)
	return key, nil
}
