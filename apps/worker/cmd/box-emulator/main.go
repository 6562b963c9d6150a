// Command box-emulator serves the Box API (as
// internal/providers/box/spec/box-openapi.yaml writes it down) and its
// boxes' desktop pages on 127.0.0.1, each box a container of the stock
// desktop image on the local Docker engine (see package
// internal/providers/box/emulator). Point the worker at it with:
//
//	BOX_API_URL=http://127.0.0.1:PORT    (the API is at …/api/box/v1)
//	BOX_API_KEY_FILE=<the file the key was written to>
//
// The key comes from BOX_API_KEY or BOX_API_KEY_FILE; without either, one
// is made and written (0600) to -key-file, whose path is printed (never
// the key).
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
	"strings"
	"syscall"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/open-bot/computer/apps/worker/internal/providers/box/emulator"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:3100", "address (loopback only)")
	keyFile := flag.String("key-file", "", "where to write a made API key when BOX_API_KEY(_FILE) is unset (default $TMPDIR/box-emulator-key)")
	image := flag.String("image", "open-bot/e2b-desktop:dev", "every box's image (the stock desktop image)")
	base := flag.String("base", "", "the URL clients reach this emulator at (default http://<the request's Host>)")
	flag.Parse()

	host, _, err := net.SplitHostPort(*listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		log.Fatalf("box-emulator: -listen %s: only a loopback address", *listen)
	}
	key, err := apiKey(*keyFile)
	if err != nil {
		log.Fatalf("box-emulator: %v", err)
	}
	cli, err := dockerclient.New(dockerclient.FromEnv)
	if err != nil {
		log.Fatalf("box-emulator: docker: %v", err)
	}
	emu, err := emulator.New(emulator.Config{APIKey: key, Image: *image, Docker: cli, Logf: log.Printf})
	if err != nil {
		log.Fatalf("box-emulator: %v", err)
	}
	if *base != "" {
		emu.SetBase(*base)
	}
	srv := &http.Server{Handler: emu, ReadHeaderTimeout: 30 * time.Second}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("box-emulator: %v", err)
	}
	log.Printf("box-emulator: listening on http://%s (BOX_API_URL)", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("box-emulator: %v", err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := emu.Close(cctx); err != nil {
		log.Printf("box-emulator: removing boxes: %v", err)
	}
}

func apiKey(keyFile string) (string, error) {
	if k := strings.TrimSpace(os.Getenv("BOX_API_KEY")); k != "" {
		return k, nil
	}
	if f := os.Getenv("BOX_API_KEY_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	if keyFile == "" {
		keyFile = os.TempDir() + "/box-emulator-key"
	}
	buf := make([]byte, 20)
	_, _ = rand.Read(buf)
	key := "box_" + hex.EncodeToString(buf)
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "box-emulator: API key written to %s (BOX_API_KEY_FILE)\n", keyFile)
	return key, nil
}
