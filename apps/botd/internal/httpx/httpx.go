// Package httpx holds the small HTTP helpers every botd API uses: JSON bodies
// with a size limit, and the one error envelope.
package httpx

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/open-bot/computer/pkg/shared"
)

// MaxJSONBody is the default cap on a JSON request body.
const MaxJSONBody = 1 << 20

// WriteJSON writes v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError renders the error envelope.
func WriteError(w http.ResponseWriter, status int, code shared.Code, msg string) {
	WriteJSON(w, status, shared.ErrorEnvelope{Error: shared.ErrorBody{Code: code, Message: msg}})
}

// WriteErr renders err: an *shared.APIError (anywhere in the chain) keeps its
// status, code and message; anything else is a 500 whose message hides the
// internals (the caller should log err).
func WriteErr(w http.ResponseWriter, err error) {
	var ae *shared.APIError
	if errors.As(err, &ae) {
		WriteError(w, ae.Status, ae.Code, ae.Message)
		return
	}
	WriteError(w, http.StatusInternalServerError, shared.CodeInternal, "internal error")
}

// DecodeJSON reads a JSON body of at most limit bytes (MaxJSONBody when 0)
// into v. Errors are *shared.APIError: 413 when too large, 400 naming the
// problem otherwise. Unknown fields are refused so typos are caught.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	if limit <= 0 {
		limit = MaxJSONBody
	}
	// A body trickled in slowly holds a handler no longer than BodyTimeout.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(BodyTimeout))
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, limit)
	}
	if _, err := dec.Token(); err != io.EOF {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return decodeError(err, limit)
		}
		return shared.Errorf(http.StatusBadRequest, shared.CodeInvalidJSON, "invalid JSON: unexpected data after the object")
	}
	return nil
}

func decodeError(err error, limit int64) error {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return shared.Errorf(http.StatusRequestEntityTooLarge, shared.CodeTooLarge, "request body is larger than %d bytes", limit)
	case errors.Is(err, io.EOF):
		return shared.Errorf(http.StatusBadRequest, shared.CodeInvalidJSON, "invalid JSON: empty body")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return shared.Errorf(http.StatusBadRequest, shared.CodeInvalidJSON, "invalid JSON: body ends early")
	case errors.As(err, &se):
		return shared.Errorf(http.StatusBadRequest, shared.CodeInvalidJSON, "invalid JSON at byte %d: %s", se.Offset, se.Error())
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "(body)"
		}
		return shared.Errorf(http.StatusBadRequest, shared.CodeInvalidJSON, "invalid JSON: field %q must be %s, not %s", field, te.Type.String(), te.Value)
	default:
		// json's "unknown field" error names the field; pass it through.
		return shared.Errorf(http.StatusBadRequest, shared.CodeInvalidJSON, "invalid JSON: %s", sanitize(err.Error()))
	}
}

// sanitize trims a decoder message to something short to show.
func sanitize(s string) string {
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
