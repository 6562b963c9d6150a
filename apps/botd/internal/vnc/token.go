package vnc

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"time"
)

// Mode is what a viewer may do: watch, or also send input while it holds
// the screen's user lease.
type Mode string

// The two modes of a viewer link.
const (
	ModeView    Mode = "view"
	ModeControl Mode = "control"
)

// Valid reports whether m is view or control.
func (m Mode) Valid() bool { return m == ModeView || m == ModeControl }

// Link TTL bounds: a link opens its screen for at most MaxLinkTTL.
const (
	DefaultLinkTTL = 5 * time.Minute
	MaxLinkTTL     = 10 * time.Minute
)

// tokenPrefix marks a viewer link token (and its format version), so it is
// never mistaken for BOTD_TOKEN.
const tokenPrefix = "vt1."

// keyLabel is the HMAC label that derives the link key from BOTD_TOKEN, so
// the bearer token itself never signs anything a browser holds.
const keyLabel = "viewer-link-v1"

// Claims are what a link token grants: one screen, one mode, until Expires.
type Claims struct {
	// Screen and Mode are the one screen and mode the link opens.
	Screen string `json:"s"`
	Mode   Mode   `json:"m"`
	// Holder is the user-lease holder a control link acts as.
	Holder string `json:"h,omitempty"`
	// Expires is Exp as a time; Exp (unix seconds) is what is signed.
	Expires time.Time `json:"-"`
	Exp     int64     `json:"e"`
	// Nonce makes two links minted in the same second differ.
	Nonce string `json:"n"`
}

// Signer mints and verifies viewer link tokens:
//
//	"vt1." base64url(json claims) "." base64url(HMAC-SHA256(key, "vt1." payload))
//
// with key = HMAC-SHA256(BOTD_TOKEN, "viewer-link-v1"). Changing BOTD_TOKEN
// (a restart with another, or Rekey after PUT /token) invalidates every
// link.
type Signer struct {
	// key is the current link key, swapped whole by Rekey: a signature is
	// made and checked with one key, the old or the new.
	key atomic.Pointer[[]byte]
	now func() time.Time
}

// NewSigner derives the link key from the bearer token. now is the clock
// (time.Now when nil).
func NewSigner(botdToken string, now func() time.Time) *Signer {
	if now == nil {
		now = time.Now
	}
	s := &Signer{now: now}
	s.Rekey(botdToken)
	return s
}

// Rekey derives the link key from a new bearer token: every link signed
// before no longer verifies, links minted after use the new key.
func (s *Signer) Rekey(botdToken string) {
	mac := hmac.New(sha256.New, []byte(botdToken))
	mac.Write([]byte(keyLabel))
	key := mac.Sum(nil)
	s.key.Store(&key)
}

// ErrBadToken is every verification failure; callers answer 401 and never
// say which check failed.
var ErrBadToken = errors.New("invalid or expired viewer link")

// Mint signs a token for screen in mode, valid for ttl (already checked by
// the caller to be in (0, MaxLinkTTL]).
func (s *Signer) Mint(screen string, mode Mode, holder string, ttl time.Duration) (string, Claims) {
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	exp := s.now().Add(ttl).Truncate(time.Second)
	c := Claims{Screen: screen, Mode: mode, Holder: holder, Exp: exp.Unix(), Nonce: hex.EncodeToString(nonce), Expires: exp}
	b, _ := json.Marshal(c)
	payload := tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return payload + "." + base64.RawURLEncoding.EncodeToString(s.sign(payload)), c
}

func (s *Signer) sign(payload string) []byte {
	mac := hmac.New(sha256.New, *s.key.Load())
	mac.Write([]byte(payload))
	return mac.Sum(nil)
}

// LooksLikeToken reports whether tok has the link token's shape (so a
// route can tell a link from a bearer token without verifying either).
func LooksLikeToken(tok string) bool { return strings.HasPrefix(tok, tokenPrefix) }

// Verify checks tok's signature and expiry and that it opens screen in
// mode. The signature is checked before anything in the payload is read.
func (s *Signer) Verify(tok, screen string, mode Mode) (Claims, error) {
	c, err := s.Parse(tok)
	if err != nil {
		return Claims{}, err
	}
	if c.Screen != screen || c.Mode != mode {
		return Claims{}, ErrBadToken
	}
	return c, nil
}

// Parse checks tok's signature and expiry and returns its claims, whatever
// screen and mode they name.
func (s *Signer) Parse(tok string) (Claims, error) {
	if len(tok) > 1024 || !LooksLikeToken(tok) {
		return Claims{}, ErrBadToken
	}
	i := strings.LastIndexByte(tok, '.')
	if i <= len(tokenPrefix) {
		return Claims{}, ErrBadToken
	}
	payload, sig := tok[:i], tok[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.sign(payload)) {
		return Claims{}, ErrBadToken
	}
	b, err := base64.RawURLEncoding.DecodeString(payload[len(tokenPrefix):])
	if err != nil {
		return Claims{}, ErrBadToken
	}
	var c Claims
	if err := json.Unmarshal(b, &c); err != nil || !c.Mode.Valid() || c.Screen == "" {
		return Claims{}, ErrBadToken
	}
	c.Expires = time.Unix(c.Exp, 0)
	if !s.now().Before(c.Expires) {
		return Claims{}, ErrBadToken
	}
	return c, nil
}
