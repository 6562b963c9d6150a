package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/open-bot/computer/pkg/shared"
)

// The vault's routes: POST and GET /v1/computers/{id}/secrets, DELETE
// /v1/computers/{id}/secrets/{name}. A value goes in and never comes out:
// answers carry names, origins and visible only, and a malformed body is
// refused without echoing any of it. visible (default false) lets
// type_secret type the value into a field that shows it.

func (a *api) putSecret(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name    string `json:"name"`
		Origin  string `json:"origin"`
		Value   string `json:"value"`
		Visible bool   `json:"visible"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeErr(w, http.StatusRequestEntityTooLarge, shared.CodeTooLarge, "body too large")
		} else {
			// The decoder's text may quote part of the body: not shown.
			writeErr(w, http.StatusBadRequest, shared.CodeInvalidJSON, `invalid JSON: want {"name", "origin", "value"} (strings) and optionally "visible" (a boolean)`)
		}
		return
	}
	v, replaced, err := a.o.Computers.PutSecret(r.Context(), r.PathValue("id"), req.Name, req.Origin, req.Value, req.Visible)
	if err != nil {
		fail(w, err)
		return
	}
	status := http.StatusCreated
	if replaced {
		status = http.StatusOK
	}
	writeJSON(w, status, map[string]any{"secret": v})
}

func (a *api) listSecrets(w http.ResponseWriter, r *http.Request) {
	list, err := a.o.Computers.Secrets(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"secrets": list})
}

func (a *api) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := a.o.Computers.DeleteSecret(r.Context(), r.PathValue("id"), r.PathValue("name")); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": r.PathValue("name")})
}
