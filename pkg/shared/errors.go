package shared

import "fmt"

// Code is a stable, machine-readable error code carried in the error envelope.
// Codes never change meaning; callers branch on them.
type Code string

// The error codes botd and the worker return.
const (
	CodeUnauthorized      Code = "unauthorized"
	CodeForbidden         Code = "forbidden"
	CodeNotFound          Code = "not_found"
	CodeMethodNotAllowed  Code = "method_not_allowed"
	CodeBadRequest        Code = "bad_request"
	CodeInvalidJSON       Code = "invalid_json"
	CodeTooLarge          Code = "payload_too_large"
	CodeInvalidAction     Code = "invalid_action"
	CodeInvalidID         Code = "invalid_id"
	CodeUserHasControl    Code = "user_has_control"
	CodeLeaseRequired     Code = "lease_required"
	CodeConflict          Code = "conflict"
	CodeMultiScreen       Code = "MULTI_SCREEN_UNAVAILABLE"
	CodeFSSandboxDenied   Code = "FS_SANDBOX_DENIED"
	CodeScreenUnavailable Code = "screen_unavailable"
	CodeBrowserError      Code = "browser_error"
	CodeTimeout           Code = "timeout"
	CodeUnavailable       Code = "unavailable"
	CodeInternal          Code = "internal"
	// CodeWindowGone: the window an action names is not on the screen (it
	// closed, or the id was never one of its windows).
	CodeWindowGone Code = "window_gone"
)

// CodeTemplateUnavailable: a create named a template its provider does not
// have (only e2b's take one: open-bot or desktop).
const CodeTemplateUnavailable Code = "TEMPLATE_UNAVAILABLE"

// ErrorBody is the inner object of the error envelope.
type ErrorBody struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// ErrorEnvelope is the one JSON shape of every error response:
// {"error":{"code":"…","message":"…"}}.
type ErrorEnvelope struct {
	Error ErrorBody `json:"error"`
}

// APIError is an error that carries its HTTP status and stable code. Domain
// packages return it (or wrap it) so the API layer can render the envelope.
type APIError struct {
	Status  int
	Code    Code
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf builds an APIError with a formatted message. The message is shown to
// callers: never put internals or secrets in it.
func Errorf(status int, code Code, format string, args ...any) *APIError {
	return &APIError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}
