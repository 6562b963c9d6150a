package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/open-bot/computer/pkg/shared/client"
)

// Attach is the attach kind: a botd the worker did not make, named by its
// URL and a token file on the worker's host. Its lifecycle is reconnect
// only: the worker never stops or destroys a machine it did not make.
type Attach struct{}

// NewAttach returns the attach provider.
func NewAttach() *Attach { return &Attach{} }

// attachRef is the attach kind's providerRef.
type attachRef struct {
	URL       string `json:"url"`
	TokenFile string `json:"tokenFile"`
}

// Describe implements Provider.
func (*Attach) Describe() Description {
	return Description{Kind: KindAttach, Capabilities: Capabilities{MultiScreen: true, Stop: false, Persistent: true}}
}

// tokenPattern is what a botd token file may hold: one line of token
// characters. Anything else (a key file, /etc/shadow) is refused, so the
// attach option cannot be used to read arbitrary files off the host.
var tokenPattern = regexp.MustCompile(`^[A-Za-z0-9._~+/=-]{16,512}$`)

// readTokenFile reads an attach token file: an absolute path, a regular
// file (no symlink followed), owned by the worker's user, mode 0600 or
// tighter, holding one token line.
func readTokenFile(path string) (string, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return "", errors.New("attach: tokenFile must be a clean absolute path")
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", fmt.Errorf("attach: tokenFile cannot be opened (%s)", errorReason(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o077 != 0 || sys == nil || int(sys.Uid) != os.Geteuid() || st.Size() > 1024 {
		return "", errors.New("attach: tokenFile must be a regular file owned by the worker's user, mode 0600, holding one token")
	}
	b := make([]byte, 1025)
	n, _ := f.Read(b)
	tok := strings.TrimSpace(string(b[:n]))
	if !tokenPattern.MatchString(tok) {
		return "", errors.New("attach: tokenFile does not hold a token (one line, 16-512 token characters)")
	}
	return tok, nil
}

func errorReason(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "no such file"
	case errors.Is(err, os.ErrPermission):
		return "permission denied"
	case errors.Is(err, syscall.ELOOP):
		return "it is a symlink"
	}
	return "unreadable"
}

func parseAttach(spec Spec) (attachRef, error) {
	u, err := url.Parse(spec.AttachURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return attachRef{}, errors.New("attach: url must be http(s)://host:port of a botd")
	}
	if _, err := readTokenFile(spec.AttachTokenFile); err != nil {
		return attachRef{}, err
	}
	return attachRef{URL: u.Scheme + "://" + u.Host, TokenFile: spec.AttachTokenFile}, nil
}

// Provision implements Provider: it checks the URL and token file and
// returns them as the ref; Reconnect proves the botd answers.
func (*Attach) Provision(_ context.Context, spec Spec) (string, error) {
	ref, err := parseAttach(spec)
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(ref)
	return string(b), nil
}

// Reconnect implements Provider: it waits (bounded by ctx) until the botd
// answers /health with its token. The token is read from the file each
// time, so an operator may rotate it.
func (*Attach) Reconnect(ctx context.Context, ref string, spec Spec) (Machine, error) {
	var r attachRef
	if err := json.Unmarshal([]byte(ref), &r); err != nil || r.URL == "" {
		return nil, errors.New("attach: malformed providerRef")
	}
	tok := spec.BotdToken
	if tok == "" {
		var err error
		if tok, err = readTokenFile(r.TokenFile); err != nil {
			return nil, err
		}
	}
	c := client.New(r.URL, tok, nil)
	var last error
	for {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.Health(hctx)
		cancel()
		if err == nil {
			return attachMachine{c: c}, nil
		}
		last = err
		if client.CodeOf(err) == "unauthorized" {
			return nil, errors.New("attach: the botd refused the token in tokenFile")
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("attach: the botd at %s does not answer: %v", r.URL, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop implements Provider: an attached botd is not the worker's to stop.
func (*Attach) Stop(context.Context, string) error {
	return fmt.Errorf("%w: an attached botd is run by someone else; the worker never stops it", ErrUnsupported)
}

// Destroy implements Provider: an attached botd is not the worker's to
// destroy (the worker only forgets it).
func (*Attach) Destroy(context.Context, string) error {
	return fmt.Errorf("%w: an attached botd is run by someone else; the worker only detaches from it", ErrUnsupported)
}

type attachMachine struct{ c *client.Client }

func (m attachMachine) Botd() *client.Client { return m.c }

// CheckScreen: botd itself answers MULTI_SCREEN_UNAVAILABLE when its
// screens are all taken.
func (attachMachine) CheckScreen(context.Context, string) error { return nil }
