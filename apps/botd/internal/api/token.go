package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/open-bot/computer/apps/botd/internal/config"
	"github.com/open-bot/computer/apps/botd/internal/httpx"
	"github.com/open-bot/computer/pkg/shared"
)

// A machine made from a shared template (a Kubernetes warm pool) starts
// with the pool's token, the same on every pod; whoever claims one (the
// worker) gives it the computer's own with PUT /token. The new token lives
// in memory only: a restarted botd reads BOTD_TOKEN_FILE again and is on
// the pool's token until it is rotated again.

// maxRotateBody caps PUT /token's body: a token longer than a token file
// may hold (4 KiB) could not be a BOTD_TOKEN either.
const maxRotateBody = 8 << 10

// rotateRequest is PUT /token's body.
type rotateRequest struct {
	Token string `json:"token"`
}

// OnTokenRotate has fn told the new token after each rotation, before the
// rotation's 204 (the viewer-link signer re-keys there). Call it during
// wiring, before serving.
func (s *Server) OnTokenRotate(fn func(newToken string)) {
	s.onRotate = append(s.onRotate, fn)
}

// rotate is PUT /token {"token":"<new>"}: authorized by the current token
// in the Authorization header only (never ?token=, never a viewer link,
// whatever the middleware let through), the new one valid by
// config.ValidToken and not the current one (400), the body at most
// maxRotateBody (413); 204 once every consumer has it. Requests already
// past the bearer check finish (a viewer-link mint among them checks the
// bearer again); every later one needs the new token.
func (s *Server) rotate(w http.ResponseWriter, r *http.Request) {
	if !s.bearerHeader(r) {
		unauthorized(w)
		return
	}
	var req rotateRequest
	if err := httpx.DecodeJSON(w, r, &req, maxRotateBody); err != nil {
		httpx.WriteErr(w, err)
		return
	}
	if err := config.ValidToken(req.Token); err != nil {
		httpx.WriteError(w, http.StatusBadRequest, shared.CodeBadRequest, "new token refused: "+err.Error())
		return
	}
	if !headerSafe(req.Token) {
		// Whitespace, control bytes or a token too long for a header
		// would lock every caller out until botd restarts.
		httpx.WriteError(w, http.StatusBadRequest, shared.CodeBadRequest, "new token refused: at most 512 printable ASCII characters, no spaces")
		return
	}
	newHash := sha256.Sum256([]byte(req.Token))

	s.rotateMu.Lock()
	defer s.rotateMu.Unlock()
	// Checked again under the lock: of two rotations sent with one token,
	// the second finds it gone (401), never undoes the first.
	if !s.bearerHeader(r) {
		unauthorized(w)
		return
	}
	if subtle.ConstantTimeCompare(newHash[:], s.tokenHash.Load()[:]) == 1 {
		httpx.WriteError(w, http.StatusBadRequest, shared.CodeBadRequest, "token is the current token")
		return
	}
	// The bearer check first, then the signer: a link minted with the new
	// key is never handed to a request that only had the old token (the
	// mint checks the bearer again after signing).
	s.tokenHash.Store(&newHash)
	for _, fn := range s.onRotate {
		fn(req.Token)
	}
	s.log.Info().Msg("bearer token rotated")
	w.WriteHeader(http.StatusNoContent)
}

// bearerHeader reports whether r's Authorization header carries the
// current token (no query token, whatever the request).
func (s *Server) bearerHeader(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && s.isToken(tok)
}

// headerSafe reports whether tok can be sent as a bearer token: 1-512
// printable ASCII characters, no space.
func headerSafe(tok string) bool {
	if len(tok) == 0 || len(tok) > 512 {
		return false
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] > '~' {
			return false
		}
	}
	return true
}
