// Command daytona-emulator serves Daytona's API, the toolbox proxy and
// preview URLs on 127.0.0.1, each sandbox a container on the local Docker
// engine (see package internal/providers/daytona/emulator). Point clients at
// it with the variables the vendor's SDK reads:
//
//	DAYTONA_API_URL=http://127.0.0.1:PORT    the API (toolboxProxyUrl and preview URLs follow from it)
//	DAYTONA_API_KEY=<the key this emulator accepts>
//
// The key comes from DAYTONA_API_KEY or DAYTONA_API_KEY_FILE; without
// either, one is made and written (0600) to -key-file, whose path is
// printed (never the key).
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

	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator"
)

type snapshotFlags map[string]emulator.Snapshot

func (t snapshotFlags) String() string { return "" }

// Set parses name=image[,user=USER][,image-entrypoint][,geometry=WxH].
func (t snapshotFlags) Set(v string) error {
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" || rest == "" {
		return errors.New("want name=image[,user=USER][,image-entrypoint][,geometry=WxH]")
	}
	image, opts, _ := strings.Cut(rest, ",")
	tpl := emulator.Snapshot{Image: image}
	for _, o := range strings.Split(opts, ",") {
		switch {
		case o == "":
		case strings.HasPrefix(o, "user="):
			tpl.User = strings.TrimPrefix(o, "user=")
		case o == "image-entrypoint":
			tpl.ImageEntrypoint = true
		case strings.HasPrefix(o, "geometry="):
			tpl.Geometry = strings.TrimPrefix(o, "geometry=")
			var w, h int
			if _, err := fmt.Sscanf(tpl.Geometry, "%dx%d", &w, &h); err != nil || w <= 0 || h <= 0 || fmt.Sprintf("%dx%d", w, h) != tpl.Geometry {
				return fmt.Errorf("geometry %q: want WxH", tpl.Geometry)
			}
		default:
			return fmt.Errorf("unknown snapshot option %q", o)
		}
	}
	t[name] = tpl
	return nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:3000", "address (loopback only)")
	keyFile := flag.String("key-file", "", "where to write a made API key when DAYTONA_API_KEY(_FILE) is unset (default $TMPDIR/daytona-emulator-key)")
	ports := flag.String("ports", "", "container ports published on 127.0.0.1, comma-separated (default 7000,8080,6080-6099)")
	minute := flag.Duration("minute", time.Minute, "how long a minute of auto-stop/auto-archive lasts (shorten to try auto-stop)")
	base := flag.String("base", "", "the URL clients reach this emulator at (default http://<the request's Host>)")
	templates := snapshotFlags{}
	flag.Var(templates, "snapshot", "snapshot mapping name=image[,user=USER][,image-entrypoint][,geometry=WxH] (repeatable; default open-bot → open-bot/computer:dev as root, desktop → open-bot/e2b-desktop:dev as user with its own entrypoint)")
	flag.Parse()

	host, _, err := net.SplitHostPort(*listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		log.Fatalf("daytona-emulator: -listen %s: only a loopback address", *listen)
	}
	if len(templates) == 0 {
		templates["open-bot"] = emulator.Snapshot{Image: "open-bot/computer:dev", User: "root"}
		templates["desktop"] = emulator.Snapshot{Image: "open-bot/e2b-desktop:dev", User: "user", ImageEntrypoint: true}
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
			log.Fatalf("daytona-emulator: -ports: bad %q", p)
		}
		for i := a; i <= b; i++ {
			portList = append(portList, i)
		}
	}
	key, err := apiKey(*keyFile)
	if err != nil {
		log.Fatalf("daytona-emulator: %v", err)
	}
	cli, err := dockerclient.New(dockerclient.FromEnv)
	if err != nil {
		log.Fatalf("daytona-emulator: docker: %v", err)
	}
	emu, err := emulator.New(emulator.Config{
		APIKey: key, Snapshots: templates, Ports: portList, Docker: cli, Minute: *minute,
		Logf: log.Printf,
	})
	if err != nil {
		log.Fatalf("daytona-emulator: %v", err)
	}
	srv := &http.Server{Addr: *listen, Handler: emu, ReadHeaderTimeout: 30 * time.Second}
	if *base != "" {
		emu.SetBase(*base)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("daytona-emulator: %v", err)
	}
	log.Printf("daytona-emulator: listening on http://%s (DAYTONA_API_URL)", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("daytona-emulator: %v", err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := emu.Close(cctx); err != nil {
		log.Printf("daytona-emulator: removing sandboxes: %v", err)
	}
}

func apiKey(keyFile string) (string, error) {
	if k := os.Getenv("DAYTONA_API_KEY"); k != "" {
		return k, nil
	}
	if f := os.Getenv("DAYTONA_API_KEY_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	if keyFile == "" {
		keyFile = os.TempDir() + "/daytona-emulator-key"
	}
	buf := make([]byte, 20)
	_, _ = rand.Read(buf)
	key := "dtn_" + hex.EncodeToString(buf)
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "daytona-emulator: API key written to %s (DAYTONA_API_KEY_FILE)\n", keyFile)
	return key, nil
}
