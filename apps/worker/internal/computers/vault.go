package computers

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/pkg/shared"
)

// The vault: secrets a caller gives a computer by name, each bound to one
// web origin. A value is sealed at rest like the botd token, never returned,
// never logged; the type_secret tool has botd type it into the focused field
// of a bot's screen only while the page in front is on its origin, and only
// into a masked password field unless the secret is visible (issue 36).

// MaxSecretValue bounds a secret's value (bytes).
const MaxSecretValue = 4096

var secretName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidSecretName reports whether name is a vault name: a short identifier.
func ValidSecretName(name string) bool { return secretName.MatchString(name) }

// ErrNoSecret: the computer has no secret of that name.
var ErrNoSecret = shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no such secret on this computer")

// SecretView is a secret as the API shows it: never its value.
type SecretView struct {
	Name   string `json:"name"`
	Origin string `json:"origin"`
	// Visible: the value may be typed into a field that shows it.
	Visible bool `json:"visible,omitempty"`
}

// NormalizeOrigin checks that raw is a web origin, scheme://host[:port],
// and returns it in the form browsers compare (lower case, no default
// port, no trailing slash). https is required; plain http is accepted only
// for a loopback host (127.0.0.0/8, ::1, localhost), where nothing crosses
// a network.
func NormalizeOrigin(raw string) (string, error) {
	bad := func(why string) (string, error) {
		return "", shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "origin: %s; want scheme://host[:port], e.g. https://accounts.example.com", why)
	}
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return bad("required")
	}
	for _, r := range raw {
		if r > unicode.MaxASCII || unicode.IsControl(r) || r == ' ' {
			return bad("ASCII only (write an international host name in its xn-- form)")
		}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return bad("not a URL")
	}
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return bad("no host")
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#") {
		return bad("an origin has no user, path, query or fragment")
	}
	ip := net.ParseIP(host)
	if ip == nil && !validHostname(host) {
		return bad("not a host name")
	}
	loopback := host == "localhost" || (ip != nil && ip.IsLoopback())
	switch scheme {
	case "https":
	case "http":
		if !loopback {
			return bad("plain http is accepted only on loopback (127.0.0.1, ::1, localhost); use https")
		}
	default:
		return bad("scheme must be https")
	}
	port := u.Port()
	if u.Host != "" && strings.HasSuffix(u.Host, ":") {
		return bad("empty port")
	}
	if port != "" {
		n := 0
		for _, c := range port {
			n = n*10 + int(c-'0')
			if n > 65535 {
				return bad("port out of range")
			}
		}
		if n == 0 {
			return bad("port out of range")
		}
		if (scheme == "https" && n == 443) || (scheme == "http" && n == 80) {
			port = ""
		}
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		return scheme + "://" + host + ":" + port, nil
	}
	return scheme + "://" + host, nil
}

func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func secretAAD(computerID, name string) string { return "vault:" + computerID + ":" + name }

// PutSecret seals value and keeps it as the computer's secret name for
// origin (replacing one of that name). It reports whether it replaced one.
// visible lets type_secret type it into a field that shows it; otherwise
// it goes only into a masked password field.
func (s *Service) PutSecret(ctx context.Context, computerID, name, origin, value string, visible bool) (SecretView, bool, error) {
	if !ValidSecretName(name) {
		return SecretView{}, false, shared.Errorf(http.StatusBadRequest, shared.CodeInvalidID, "name: want a short identifier, [A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
	}
	o, err := NormalizeOrigin(origin)
	if err != nil {
		return SecretView{}, false, err
	}
	switch {
	case value == "":
		return SecretView{}, false, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "value is required")
	case len(value) > MaxSecretValue:
		return SecretView{}, false, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "value: at most %d bytes", MaxSecretValue)
	case !utf8.ValidString(value):
		return SecretView{}, false, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "value: not valid UTF-8")
	case strings.IndexFunc(value, unicode.IsControl) >= 0:
		return SecretView{}, false, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "value: control characters (newline, tab…) cannot be typed into a field")
	}
	c, err := s.Get(ctx, computerID)
	if err != nil {
		return SecretView{}, false, err
	}
	sealed, err := s.o.Sealer.Seal([]byte(value), secretAAD(c.ID, name))
	if err != nil {
		return SecretView{}, false, err
	}
	replaced, err := s.o.Store.PutSecret(ctx, store.Secret{ComputerID: c.ID, Name: name, Origin: o, Value: sealed, Visible: visible})
	if err != nil {
		return SecretView{}, false, err
	}
	return SecretView{Name: name, Origin: o, Visible: visible}, replaced, nil
}

// Secrets lists the computer's secrets: names and origins only.
func (s *Service) Secrets(ctx context.Context, computerID string) ([]SecretView, error) {
	c, err := s.Get(ctx, computerID)
	if err != nil {
		return nil, err
	}
	list, err := s.o.Store.ListSecrets(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	out := make([]SecretView, 0, len(list))
	for _, sec := range list {
		out = append(out, SecretView{Name: sec.Name, Origin: sec.Origin, Visible: sec.Visible})
	}
	return out, nil
}

// DeleteSecret removes the computer's secret name.
func (s *Service) DeleteSecret(ctx context.Context, computerID, name string) error {
	c, err := s.Get(ctx, computerID)
	if err != nil {
		return err
	}
	if !ValidSecretName(name) {
		return ErrNoSecret
	}
	err = s.o.Store.DeleteSecret(ctx, c.ID, name)
	if errors.Is(err, store.ErrNotFound) {
		return ErrNoSecret
	}
	return err
}

// forgetSecrets removes a computer's vault when it is being destroyed.
func (s *Service) forgetSecrets(ctx context.Context, computerID string) {
	list, err := s.o.Store.ListSecrets(ctx, computerID)
	if err != nil {
		s.o.Log.Warn().Str("computer", computerID).Err(err).Msg("list the vault of a destroyed computer")
		return
	}
	for _, sec := range list {
		if err := s.o.Store.DeleteSecret(ctx, computerID, sec.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.o.Log.Warn().Str("computer", computerID).Err(err).Msg("remove the vault of a destroyed computer")
		}
	}
}

// OpenedSecret is a vault entry opened for the type_secret tool.
type OpenedSecret struct {
	Origin string
	// Value is the clear value: typed, never logged or returned.
	Value string
	// Visible: it may be typed into a field that shows it.
	Visible bool
}

// OpenSecret returns the origin, clear value and visibility of the
// computer's secret name, for the type_secret tool only.
func (s *Service) OpenSecret(ctx context.Context, computerID, name string) (OpenedSecret, error) {
	if !ValidSecretName(name) {
		return OpenedSecret{}, ErrNoSecret
	}
	sec, err := s.o.Store.GetSecret(ctx, computerID, name)
	if errors.Is(err, store.ErrNotFound) {
		return OpenedSecret{}, ErrNoSecret
	}
	if err != nil {
		return OpenedSecret{}, err
	}
	plain, err := s.o.Sealer.Open(sec.Value, secretAAD(computerID, name))
	if err != nil {
		return OpenedSecret{}, shared.Errorf(http.StatusInternalServerError, shared.CodeInternal, "secret %s does not open with this worker's key", name)
	}
	return OpenedSecret{Origin: sec.Origin, Value: string(plain), Visible: sec.Visible}, nil
}

// SecretOpener is OpenSecret bound to one computer, for a tools session;
// names lists what it holds (for the model's error text).
func (s *Service) SecretOpener(computerID string) (open func(ctx context.Context, name string) (origin, value string, visible bool, err error), names func(ctx context.Context) []string) {
	open = func(ctx context.Context, name string) (string, string, bool, error) {
		o, err := s.OpenSecret(ctx, computerID, name)
		return o.Origin, o.Value, o.Visible, err
	}
	names = func(ctx context.Context) []string {
		list, err := s.o.Store.ListSecrets(ctx, computerID)
		if err != nil {
			return nil
		}
		out := make([]string, 0, len(list))
		for _, sec := range list {
			out = append(out, sec.Name)
		}
		return out
	}
	return open, names
}
