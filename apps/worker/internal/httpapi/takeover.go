package httpapi

import (
	"net/http"

	"github.com/open-bot/computer/apps/worker/internal/takeover"
)

// MountTakeover adds the take-control routes (CONTROL-PLANE.md, Routes):
// POST /v1/computers/{id}/bots/{bot}/takeover → {controlUrl, expiresAt}, or
// 409 "Stop the bot first"; DELETE … releases. Call it from Options.Mount.
func MountTakeover(mux *http.ServeMux, gate func(http.HandlerFunc) http.HandlerFunc, t *takeover.Service) {
	mux.HandleFunc("POST /v1/computers/{id}/bots/{bot}/takeover", gate(func(w http.ResponseWriter, r *http.Request) {
		base := "http://" + r.Host
		if r.TLS != nil {
			base = "https://" + r.Host
		}
		link, err := t.Take(r.Context(), r.PathValue("id"), r.PathValue("bot"), base)
		if err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, link)
	}))
	mux.HandleFunc("DELETE /v1/computers/{id}/bots/{bot}/takeover", gate(func(w http.ResponseWriter, r *http.Request) {
		if err := t.Release(r.Context(), r.PathValue("id"), r.PathValue("bot")); err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"released": true})
	}))
}
