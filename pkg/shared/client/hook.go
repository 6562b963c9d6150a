package client

import (
	"context"
	"net/http"
)

// CallHook is told of each request the client sends to botd under a
// context that carries it (WithCallHook): the worker's tracing, which
// this module does not import. It gets the method, the path without its
// query and an empty header to fill (trace context) that the request then
// carries; it never sees the request's own headers, so never the token.
// The func it returns is told the answer's status (0 when none came) and
// the error, once the answer's headers are in.
type CallHook func(ctx context.Context, method, path string, h http.Header) (done func(status int, err error))

type hookKey struct{}

// WithCallHook returns ctx whose calls go through hook.
func WithCallHook(ctx context.Context, hook CallHook) context.Context {
	return context.WithValue(ctx, hookKey{}, hook)
}

// hooked runs send under ctx's hook, if any: the hook's headers are added
// to req (never replacing one the client set, Authorization included).
func hooked(ctx context.Context, req *http.Request, path string, send func() (*http.Response, error)) (*http.Response, error) {
	hook, _ := ctx.Value(hookKey{}).(CallHook)
	if hook == nil {
		return send()
	}
	h := http.Header{}
	done := hook(ctx, req.Method, pathOnly(path), h)
	for k, v := range h {
		if _, set := req.Header[k]; !set {
			req.Header[k] = v
		}
	}
	resp, err := send()
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	if done != nil {
		done(status, err)
	}
	return resp, err
}
