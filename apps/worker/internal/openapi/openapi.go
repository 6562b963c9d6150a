// Package openapi holds the worker's OpenAPI 3.1 document of every /v1 route
// (openapi.json, hand-written and kept exact: the router walk and the
// validating transport in ./openapitest fail a test when it is not) and
// serves it at GET /v1/openapi.json.
//
// The route is served with the worker's bearer token like every /v1 route
// (the auth middleware's only exception stays /healthz): the document holds
// nothing secret, but keeping the rule without exceptions keeps the
// middleware fail-closed, and whoever has no token can read the same file in
// the repository.
package openapi

// The TypeScript client's types (tsclient/schema.d.ts), generated from the
// document with openapi-typescript at the version tsclient/package-lock.json
// pins.
//go:generate tsclient/generate.sh

import (
	_ "embed"
	"net/http"
)

// Path is where the document is served.
const Path = "/v1/openapi.json"

// Document is openapi.json, byte for byte.
//
//go:embed openapi.json
var Document []byte

// Serve answers with the document.
func Serve(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(Document)
}
