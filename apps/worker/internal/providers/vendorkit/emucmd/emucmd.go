// Package emucmd is what the vendor emulators' commands (cmd/e2b-emulator,
// cmd/daytona-emulator, cmd/box-emulator) share: a loopback-only listener,
// the API key they accept (from the vendor's own variables, or made and
// written 0600 to a file whose path, never the key, is printed), the
// image-mapping and port-list flags, and serving until SIGINT/SIGTERM with
// the emulator's sandboxes removed at the end.
package emucmd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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
)

// Cmd names one emulator command.
type Cmd struct {
	Name      string // "e2b-emulator"
	Env       string // the vendor's variable prefix: "E2B" reads E2B_API_KEY(_FILE)
	KeyPrefix string // a made key's prefix: "e2b_"
}

// Fatalf logs under the command's name and exits.
func (c Cmd) Fatalf(format string, args ...any) {
	log.Fatalf(c.Name+": "+format, args...)
}

// Listen listens on addr, which must be a loopback address.
func (c Cmd) Listen(addr string) net.Listener {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		c.Fatalf("-listen %s: only a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		c.Fatalf("%v", err)
	}
	return ln
}

// APIKey is the key the emulator accepts: {Env}_API_KEY, else the file
// {Env}_API_KEY_FILE names, else a new one written (0600) to keyFile
// (default $TMPDIR/{Name}-key), whose path is printed.
func (c Cmd) APIKey(keyFile string) string {
	if k := os.Getenv(c.Env + "_API_KEY"); k != "" {
		return k
	}
	if f := os.Getenv(c.Env + "_API_KEY_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			c.Fatalf("%v", err)
		}
		return strings.TrimSpace(string(b))
	}
	if keyFile == "" {
		keyFile = os.TempDir() + "/" + c.Name + "-key"
	}
	buf := make([]byte, 20)
	_, _ = rand.Read(buf)
	key := c.KeyPrefix + hex.EncodeToString(buf)
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		c.Fatalf("%v", err)
	}
	fmt.Fprintf(os.Stderr, "%s: API key written to %s (%s_API_KEY_FILE)\n", c.Name, keyFile, c.Env)
	return key
}

// Ports parses a -ports list ("7000,8080,6080-6099"); empty gives nil.
func (c Cmd) Ports(spec string) []int {
	var out []int
	for _, p := range strings.Split(spec, ",") {
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
			c.Fatalf("-ports: bad %q", p)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out
}

// Serve serves srv on ln until SIGINT or SIGTERM, then shuts it down and
// calls closeAll (the emulator removing its sandboxes), a minute at most.
func (c Cmd) Serve(srv *http.Server, ln net.Listener, closeAll func(context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		c.Fatalf("%v", err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := closeAll(cctx); err != nil {
		log.Printf("%s: removing sandboxes: %v", c.Name, err)
	}
}

// Image is one name=image[,user=USER][,image-entrypoint][,geometry=WxH]
// mapping (a template or snapshot name to the local image its sandboxes
// run).
type Image struct {
	Image           string
	User            string
	ImageEntrypoint bool
	Geometry        string // "" unless given (and allowed)
}

// ParseImage parses a mapping; geometry says whether geometry=WxH is taken.
func ParseImage(v string, geometry bool) (string, Image, error) {
	want := "want name=image[,user=USER][,image-entrypoint]"
	if geometry {
		want += "[,geometry=WxH]"
	}
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" || rest == "" {
		return "", Image{}, errors.New(want)
	}
	image, opts, _ := strings.Cut(rest, ",")
	im := Image{Image: image}
	for _, o := range strings.Split(opts, ",") {
		switch {
		case o == "":
		case strings.HasPrefix(o, "user="):
			im.User = strings.TrimPrefix(o, "user=")
		case o == "image-entrypoint":
			im.ImageEntrypoint = true
		case geometry && strings.HasPrefix(o, "geometry="):
			im.Geometry = strings.TrimPrefix(o, "geometry=")
			var w, h int
			if _, err := fmt.Sscanf(im.Geometry, "%dx%d", &w, &h); err != nil || w <= 0 || h <= 0 || fmt.Sprintf("%dx%d", w, h) != im.Geometry {
				return "", Image{}, fmt.Errorf("geometry %q: want WxH", im.Geometry)
			}
		default:
			return "", Image{}, fmt.Errorf("unknown option %q (%s)", o, want)
		}
	}
	return name, im, nil
}
