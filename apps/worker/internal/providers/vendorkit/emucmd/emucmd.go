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
	"io/fs"
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
// (default $TMPDIR/{Name}-key), whose path is printed. keyFile must be
// new or this user's own 0600 regular file from an earlier start
// (writeKeyFile): anything else there is refused and the command exits.
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
	if err := c.writeKeyFile(keyFile, []byte(key+"\n")); err != nil {
		c.Fatalf("%v", err)
	}
	fmt.Fprintf(os.Stderr, "%s: API key written to %s (%s_API_KEY_FILE)\n", c.Name, keyFile, c.Env)
	return key
}

// writeKeyFile writes key to path, a new file (0600, O_EXCL, O_NOFOLLOW)
// or this user's own earlier one: the key file's directory is shared
// (/tmp), so whatever else is already at path (another user's file, a
// symlink, a file others may read) may have been planted there to read
// the key or to have it written through, and is refused untouched.
func (c Cmd) writeKeyFile(path string, key []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		f, err = c.reopenKeyFile(path)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(key); err != nil {
		_ = f.Close()
		return fmt.Errorf("-key-file %s: %w", path, err)
	}
	return f.Close()
}

// reopenKeyFile opens the key file an earlier start of this emulator left
// at path, truncated, when it is still what that start made: a regular
// file (opened without following a symlink, checked on the open file)
// owned by this user, mode 0600, with one link.
func (c Cmd) reopenKeyFile(path string) (*os.File, error) {
	refuse := fmt.Errorf("-key-file %s already exists and is not this user's own 0600 regular file (another user or a symlink may have put it there); remove it (rm -f %s) or pass a key with %s_API_KEY_FILE", path, path, c.Env)
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, refuse
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil ||
		st.Mode&syscall.S_IFMT != syscall.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o7777 != 0o600 || st.Nlink != 1 {
		_ = f.Close()
		return nil, refuse
	}
	if err := f.Truncate(0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("-key-file %s: %w", path, err)
	}
	return f, nil
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
