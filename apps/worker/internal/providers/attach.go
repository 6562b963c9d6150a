package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Attach is the attach kind: a botd the worker did not make, named by its
// URL and its token, which the operator gives by value (the worker keeps it
// sealed with the computer, like every botd token, and reads no file a
// caller names). Its lifecycle is reconnect only: the worker never stops or
// destroys a machine it did not make.
type Attach struct{}

// NewAttach returns the attach provider.
func NewAttach() *Attach { return &Attach{} }

// attachRef is the attach kind's providerRef (never the token; a ref of an
// older worker may also name a tokenFile, which is not read).
type attachRef struct {
	URL string `json:"url"`
}

// Describe implements Provider.
func (*Attach) Describe() Description {
	return Description{Kind: KindAttach, Capabilities: Capabilities{MultiScreen: true, Stop: false, Persistent: true}}
}

// tokenPattern is what a botd token may be: one line of token characters.
var tokenPattern = regexp.MustCompile(`^[A-Za-z0-9._~+/=-]{16,512}$`)

// ValidAttachToken reports whether tok can be a botd token.
func ValidAttachToken(tok string) bool { return tokenPattern.MatchString(tok) }

func parseAttach(spec Spec) (attachRef, error) {
	u, err := url.Parse(spec.AttachURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return attachRef{}, errors.New("attach: url must be http(s)://host:port of a botd")
	}
	if !ValidAttachToken(spec.BotdToken) {
		return attachRef{}, errors.New("attach: token must be the botd's token (16-512 token characters)")
	}
	return attachRef{URL: u.Scheme + "://" + u.Host}, nil
}

// Provision implements Provider: it checks the URL and token and returns
// the URL as the ref; Reconnect proves the botd answers.
func (*Attach) Provision(_ context.Context, spec Spec) (string, error) {
	ref, err := parseAttach(spec)
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(ref)
	return string(b), nil
}

// Reconnect implements Provider: it waits (bounded by ctx) until the botd
// answers /health with the computer's sealed token.
func (*Attach) Reconnect(ctx context.Context, ref string, spec Spec) (Machine, error) {
	var r attachRef
	if err := json.Unmarshal([]byte(ref), &r); err != nil || r.URL == "" {
		return nil, errors.New("attach: malformed providerRef")
	}
	tok := spec.BotdToken
	if tok == "" {
		return nil, errors.New("attach: no token is kept for this computer (it was attached with a tokenFile, which the worker no longer reads): destroy it and attach the botd again with its token by value")
	}
	c := machines.NewBotd(r.URL, tok)
	var last error
	for {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.Health(hctx)
		cancel()
		if err == nil {
			return c, nil
		}
		last = err
		if client.CodeOf(err) == "unauthorized" {
			return nil, errors.New("attach: the botd refused the token")
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
