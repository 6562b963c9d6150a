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
	"flag"
	"log"
	"net/http"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/open-bot/computer/apps/worker/internal/providers/daytona/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emucmd"
)

var cmd = emucmd.Cmd{Name: "daytona-emulator", Env: "DAYTONA", KeyPrefix: "dtn_"}

type snapshotFlags map[string]emulator.Snapshot

func (t snapshotFlags) String() string { return "" }

// Set parses name=image[,user=USER][,image-entrypoint][,geometry=WxH].
func (t snapshotFlags) Set(v string) error {
	name, im, err := emucmd.ParseImage(v, true)
	if err != nil {
		return err
	}
	t[name] = emulator.Snapshot{Image: im.Image, User: im.User, ImageEntrypoint: im.ImageEntrypoint, Geometry: im.Geometry}
	return nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:3000", "address (loopback only)")
	keyFile := flag.String("key-file", "", "where to write a made API key when DAYTONA_API_KEY(_FILE) is unset (default $TMPDIR/daytona-emulator-key)")
	ports := flag.String("ports", "", "container ports the emulator reaches (at the container's bridge address), comma-separated (default 7000,8080,6080-6099)")
	minute := flag.Duration("minute", time.Minute, "how long a minute of auto-stop/auto-archive lasts (shorten to try auto-stop)")
	base := flag.String("base", "", "the URL clients reach this emulator at (default http://<the request's Host>)")
	snapshots := snapshotFlags{}
	flag.Var(snapshots, "snapshot", "snapshot mapping name=image[,user=USER][,image-entrypoint][,geometry=WxH] (repeatable; default open-bot → open-bot/computer:dev as root, desktop → open-bot/e2b-desktop:dev as user with its own entrypoint)")
	flag.Parse()

	ln := cmd.Listen(*listen)
	if len(snapshots) == 0 {
		snapshots["open-bot"] = emulator.Snapshot{Image: "open-bot/computer:dev", User: "root"}
		snapshots["desktop"] = emulator.Snapshot{Image: "open-bot/e2b-desktop:dev", User: "user", ImageEntrypoint: true}
	}
	portList := cmd.Ports(*ports)
	key := cmd.APIKey(*keyFile)
	cli, err := dockerclient.New(dockerclient.FromEnv)
	if err != nil {
		cmd.Fatalf("docker: %v", err)
	}
	emu, err := emulator.New(emulator.Config{
		APIKey: key, Snapshots: snapshots, Ports: portList, Docker: cli, Minute: *minute,
		Logf: log.Printf,
	})
	if err != nil {
		cmd.Fatalf("%v", err)
	}
	if *base != "" {
		emu.SetBase(*base)
	}
	srv := &http.Server{Handler: emu, ReadHeaderTimeout: 30 * time.Second}
	log.Printf("daytona-emulator: listening on http://%s (DAYTONA_API_URL)", ln.Addr())
	cmd.Serve(srv, ln, emu.Close)
}
