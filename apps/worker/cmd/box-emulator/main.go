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
	"flag"
	"log"
	"net/http"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/open-bot/computer/apps/worker/internal/providers/box/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emucmd"
)

var cmd = emucmd.Cmd{Name: "box-emulator", Env: "BOX", KeyPrefix: "box_"}

func main() {
	listen := flag.String("listen", "127.0.0.1:3100", "address (loopback only)")
	keyFile := flag.String("key-file", "", "where to write a made API key when BOX_API_KEY(_FILE) is unset (default $TMPDIR/box-emulator-key)")
	image := flag.String("image", "open-bot/e2b-desktop:dev", "every box's image (the stock desktop image)")
	base := flag.String("base", "", "the URL clients reach this emulator at (default http://<the request's Host>)")
	flag.Parse()

	ln := cmd.Listen(*listen)
	key := cmd.APIKey(*keyFile)
	cli, err := dockerclient.New(dockerclient.FromEnv)
	if err != nil {
		cmd.Fatalf("docker: %v", err)
	}
	emu, err := emulator.New(emulator.Config{APIKey: key, Image: *image, Docker: cli, Logf: log.Printf})
	if err != nil {
		cmd.Fatalf("%v", err)
	}
	if *base != "" {
		emu.SetBase(*base)
	}
	srv := &http.Server{Handler: emu, ReadHeaderTimeout: 30 * time.Second}
	log.Printf("box-emulator: listening on http://%s (BOX_API_URL)", ln.Addr())
	cmd.Serve(srv, ln, emu.Close)
}
