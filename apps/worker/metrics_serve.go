package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/open-bot/computer/apps/worker/internal/metrics"
)

// serveMetrics serves m on addr (WORKER_METRICS_LISTEN) at /metrics, for
// the operator only: with WORKER_OPERATOR_TOKEN set every scrape must
// carry it as a bearer token; without one, addr must be a loopback
// address (this host's operator and its Prometheus), never the API's
// public listener. It stops with ctx.
func serveMetrics(ctx context.Context, addr, operatorToken string, m *metrics.Metrics, log zerolog.Logger) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("WORKER_METRICS_LISTEN: %w", err)
	}
	if operatorToken == "" && !loopbackHost(host) {
		return nil, errors.New("WORKER_METRICS_LISTEN: a non-loopback address needs WORKER_OPERATOR_TOKEN(_FILE), which every scrape then presents (metrics are the operator's)")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("WORKER_METRICS_LISTEN: %w", err)
	}
	h := m.Handler()
	want := sha256.Sum256([]byte(operatorToken))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if operatorToken != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", "Bearer")
				http.Error(w, "metrics need the operator's token (WORKER_OPERATOR_TOKEN)", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn().Err(err).Msg("metrics listener ended")
		}
	}()
	return ln, nil
}

// loopbackHost reports whether host is a loopback address or localhost.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
