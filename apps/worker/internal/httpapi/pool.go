package httpapi

import (
	"net/http"

	"github.com/open-bot/computer/apps/worker/internal/computers"
)

// MountPool adds GET /pool: the warm pool (WORKER_POOL) per provider kind —
// wanted, ready machines (the computer id each will get, its ref, its age),
// whether one is being made, how many were handed out, the last error.
// Operator only: it is the host's state, not a caller's; outside /v1, like
// /healthz, since no caller API uses it.
func MountPool(mux *http.ServeMux, comps *computers.Service) {
	mux.HandleFunc("GET /pool", Operator(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"pool": comps.Pool()})
	}))
}
