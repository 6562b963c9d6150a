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
	"flag"
	"log"
	"net/http"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/emulator"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit/emucmd"
)

var cmd = emucmd.Cmd{Name: "e2b-emulator", Env: "E2B", KeyPrefix: "e2b_"}

type templateFlags map[string]emulator.Template

func (t templateFlags) String() string { return "" }

// Set parses name=image[,user=USER][,image-entrypoint].
func (t templateFlags) Set(v string) error {
	name, im, err := emucmd.ParseImage(v, false)
	if err != nil {
		return err
	}
	t[name] = emulator.Template{Image: im.Image, User: im.User, ImageEntrypoint: im.ImageEntrypoint}
	return nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:3000", "address (loopback only)")
	domain := flag.String("domain", "e2b.localhost", "sandbox domain ({port}-{sandboxID}.DOMAIN)")
	keyFile := flag.String("key-file", "", "where to write a made API key when E2B_API_KEY(_FILE) is unset (default $TMPDIR/e2b-emulator-key)")
	ports := flag.String("ports", "", "container ports the emulator reaches (at the container's bridge address), comma-separated (default 7000,8080,6080-6099)")
	templates := templateFlags{}
	flag.Var(templates, "template", "template mapping name=image[,user=USER][,image-entrypoint] (repeatable; default open-bot and base → open-bot/computer:dev as root, desktop → open-bot/e2b-desktop:dev as user with its own entrypoint)")
	flag.Parse()

	ln := cmd.Listen(*listen)
	if len(templates) == 0 {
		templates["open-bot"] = emulator.Template{Image: "open-bot/computer:dev", User: "root"}
		templates["base"] = emulator.Template{Image: "open-bot/computer:dev", User: "root"}
		templates["desktop"] = emulator.Template{Image: "open-bot/e2b-desktop:dev", User: "user", ImageEntrypoint: true}
	}
	portList := cmd.Ports(*ports)
	key := cmd.APIKey(*keyFile)
	cli, err := dockerclient.New(dockerclient.FromEnv)
	if err != nil {
		cmd.Fatalf("docker: %v", err)
	}
	emu, err := emulator.New(emulator.Config{
		APIKey: key, Domain: *domain, Templates: templates, Ports: portList, Docker: cli,
		Logf: log.Printf,
	})
	if err != nil {
		cmd.Fatalf("%v", err)
	}
	srv := &http.Server{Handler: emu, ReadHeaderTimeout: 30 * time.Second}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true) // Connect's client streams need HTTP/2
	log.Printf("e2b-emulator: listening on http://%s (E2B_API_URL and E2B_SANDBOX_URL), sandbox domain %s", ln.Addr(), *domain)
	cmd.Serve(srv, ln, emu.Close)
}
