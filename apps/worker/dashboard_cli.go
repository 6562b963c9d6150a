package main

// `worker dashboard`: asks the running worker for a one-time dashboard
// sign-in link and prints it (the link is a secret for the person at this
// terminal; the worker never logs it).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/open-bot/computer/apps/worker/internal/httpapi"
	"github.com/open-bot/computer/apps/worker/internal/takeover"
)

func runDashboard(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	c := &cliClient{out: os.Stdout}
	commonFlags(fs, c)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.useOperator(); err != nil {
		return err
	}
	var res struct {
		URL string `json:"url"`
	}
	if err := c.call(ctx, http.MethodPost, "/v1/dashboard/login-link", struct{}{}, &res); err != nil {
		return err
	}
	if !c.asJSON {
		fmt.Fprintf(c.out, "Open this one-time link within 10 minutes (it signs you in once):\n%s\n", res.URL)
	}
	return nil
}

// mountLogin adds POST /v1/dashboard/login-link (the operator's credential:
// the link views and takes over every screen): a fresh one-time sign-in
// link on the address the caller used (over the operator socket, the
// worker's own address).
func mountLogin(mux *http.ServeMux, p *takeover.People) {
	mux.HandleFunc("POST /v1/dashboard/login-link", httpapi.Operator(func(w http.ResponseWriter, r *http.Request) {
		base := "http://" + r.Host
		if r.TLS != nil {
			base = "https://" + r.Host
		}
		link, err := p.LoginLink(strings.TrimRight(base, "/"))
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":{"code":"internal","message":"could not mint a link"}}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"url": link})
	}))
}
