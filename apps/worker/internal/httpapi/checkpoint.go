package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/pkg/shared"
)

// CheckpointView is POST /v1/computers/{id}/checkpoint's answer and a
// computer's lastCheckpoint.
type CheckpointView struct {
	Revision int64     `json:"revision"`
	Size     int64     `json:"size"`
	At       time.Time `json:"at"`
}

// MountCheckpoint adds POST /v1/computers/{id}/checkpoint (the computer's
// portable home is exported into the home store now, a full copy even of
// a worker-owned home) and POST
// /v1/computers/{id}/move {provider} (a machine of another kind, restored
// from the latest checkpoint).
func MountCheckpoint(mux *http.ServeMux, gate func(http.HandlerFunc) http.HandlerFunc, comps *computers.Service) {
	mux.HandleFunc("POST /v1/computers/{id}/checkpoint", gate(func(w http.ResponseWriter, r *http.Request) {
		cp, err := comps.Export(r.Context(), r.PathValue("id"))
		var ae *shared.APIError
		if err != nil && !errors.As(err, &ae) && !errors.Is(err, store.ErrUnavailable) {
			// The export or the home store failed: say so (no secret is in
			// these errors); the previous checkpoint is intact.
			err = shared.Errorf(http.StatusBadGateway, shared.CodeUnavailable, "checkpoint failed, the previous one is kept: %v", err)
		}
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, CheckpointView{Revision: cp.Revision, Size: cp.Size, At: cp.At.UTC()})
	}))
	mux.HandleFunc("POST /v1/computers/{id}/move", gate(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Provider string `json:"provider"`
		}
		if !decode(w, r, &req) {
			return
		}
		v, err := comps.Move(r.Context(), r.PathValue("id"), req.Provider)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"computer": v})
	}))
}
