// Package modelproxy is botd's loopback model proxy (THREAT-MODEL rule 3):
// Codex, which runs as bot, talks to it with a per-boot token; the proxy
// swaps that token for the model provider's real key, which only root holds,
// and forwards to the provider. The key never enters bot's environment or
// files, and is never logged.
package modelproxy

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/botd/internal/httpx"
)

// TokenEnv is the variable Codex reads the per-boot token from (the
// provider table's env_key).
const TokenEnv = "OPEN_BOT_MODEL_TOKEN"

// ProviderID is the Codex model provider botd manages.
const ProviderID = "botd"

// maxBody caps one request to the model (a conversation with screenshots).
const maxBody = 128 << 20

// Options configures the proxy.
type Options struct {
	// Listen is a loopback address (default 127.0.0.1:0, a free port).
	Listen string
	// Upstream is the provider's base URL, e.g. https://api.openai.com/v1.
	Upstream string
	// Key is the provider's API key. Never logged.
	Key string
	// MaxConns caps open connections (httpx.DefaultMaxConns when 0).
	MaxConns int
	Log      zerolog.Logger
}

// Proxy is a running model proxy.
type Proxy struct {
	ln    net.Listener
	srv   *http.Server
	token string
}

// Start listens and serves until Close.
func Start(o Options) (*Proxy, error) {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("MODEL_PROXY_LISTEN %q: %w", o.Listen, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("MODEL_PROXY_LISTEN must be a loopback address, not %q", o.Listen)
	}
	up, err := url.Parse(o.Upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return nil, errors.New("MODEL_UPSTREAM_URL must be an http(s) URL")
	}
	if o.Key == "" {
		return nil, errors.New("the model provider's key is empty (MODEL_API_KEY or MODEL_API_KEY_FILE)")
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	p := &Proxy{token: hex.EncodeToString(b)}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("model proxy: %w", err)
	}
	p.ln = ln
	ln = httpx.LimitListener(ln, o.MaxConns, true)
	log := o.Log.With().Str("component", "modelproxy").Logger()
	base := strings.TrimSuffix(up.Path, "/")
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = up.Scheme, up.Host
			r.Out.URL.Path = base + strings.TrimPrefix(r.In.URL.Path, "/v1")
			r.Out.URL.RawPath = ""
			r.Out.Host = up.Host
			r.Out.Header.Del("Authorization")
			r.Out.Header.Del("Api-Key")
			r.Out.Header.Del("X-Api-Key")
			r.Out.Header.Set("Authorization", "Bearer "+o.Key)
		},
		FlushInterval: -1, // server-sent events pass through as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn().Str("path", r.URL.Path).Err(err).Msg("model provider unreachable")
			http.Error(w, "the model provider did not answer", http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(p.token)) != 1 {
				http.Error(w, "missing or wrong model proxy token", http.StatusUnauthorized)
				return
			}
			if !strings.HasPrefix(r.URL.Path, "/v1/") {
				http.NotFound(w, r)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
			rp.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: httpx.ReadHeaderTimeout,
		IdleTimeout:       httpx.IdleTimeout,
		MaxHeaderBytes:    httpx.MaxHeaderBytes,
	}
	go func() { _ = p.srv.Serve(ln) }()
	log.Info().Str("listen", ln.Addr().String()).Msg("model proxy listening")
	return p, nil
}

// BaseURL is what Codex's provider table points at.
func (p *Proxy) BaseURL() string { return "http://" + p.ln.Addr().String() + "/v1" }

// Token is the per-boot token Codex sends (not the provider's key).
func (p *Proxy) Token() string { return p.token }

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// ProviderTOML is the Codex provider table for the proxy.
func (p *Proxy) ProviderTOML() string {
	return fmt.Sprintf("\n[model_providers.%s]\nname = \"botd model proxy\"\nbase_url = %q\nwire_api = \"responses\"\nenv_key = %q\n",
		ProviderID, p.BaseURL(), TokenEnv)
}
