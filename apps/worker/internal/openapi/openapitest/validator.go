// Package openapitest holds the worker's API to its OpenAPI document
// (../openapi.json) in tests: a Validator (getkin/kin-openapi's
// openapi3filter, which validates OpenAPI 3.1 documents with JSON Schema
// 2020-12), a Checker http.RoundTripper that validates every request a test
// client makes and every answer it gets, and Routes, which walks a real
// http.ServeMux for the patterns registered on it.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/open-bot/computer/apps/worker/internal/openapi"
)

// Validator validates requests and answers against the document.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
}

// Load loads and validates the embedded document. Its servers are dropped
// so that routes match whatever host a test server listens on.
func Load() (*Validator, error) {
	return LoadData(openapi.Document)
}

// LoadData loads a document (Load's, or a changed copy in a test of the
// checks themselves).
func LoadData(data []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	if doc.OpenAPIMajorMinor() != "3.1" {
		return nil, fmt.Errorf("openapi.json: version %q, want 3.1.x", doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: router: %w", err)
	}
	return &Validator{doc: doc, router: router}, nil
}

// Doc is the loaded document.
func (v *Validator) Doc() *openapi3.T { return v.doc }

func options() *openapi3filter.Options {
	o := &openapi3filter.Options{
		IncludeResponseStatus:             true,
		RejectWhenRequestBodyNotSpecified: true,
		AuthenticationFunc:                requireCredential,
	}
	// Say where and why, never the value: bodies carry tokens, capabilities
	// and secret values.
	o.WithCustomSchemaErrorFunc(func(err *openapi3.SchemaError) string {
		return fmt.Sprintf("at /%s: %s", strings.Join(err.JSONPointer(), "/"), err.Reason)
	})
	return o
}

// requireCredential accepts a security scheme when the request carries its
// credential (presence only: whether it is right is the worker's call, and
// its 401 or 404 is then validated as an answer).
func requireCredential(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s := in.SecurityScheme
	req := in.RequestValidationInput.Request
	switch {
	case s.Type == "apiKey" && s.In == "header":
		if req.Header.Get(s.Name) == "" {
			return fmt.Errorf("no %s header", s.Name)
		}
	case s.Type == "apiKey" && s.In == "query":
		if req.URL.Query().Get(s.Name) == "" {
			return fmt.Errorf("no %s parameter", s.Name)
		}
	case s.Type == "http" && strings.EqualFold(s.Scheme, "bearer"):
		if !strings.HasPrefix(req.Header.Get("Authorization"), "Bearer ") {
			return fmt.Errorf("no bearer token")
		}
	default:
		return fmt.Errorf("security scheme %s/%s not checked", s.Type, s.In)
	}
	return nil
}

// ErrNoRoute is wrapped by the errors of a request whose path and method
// the document does not have.
var ErrNoRoute = fmt.Errorf("not in the document")

func (v *Validator) input(req *http.Request, body []byte) (*openapi3filter.RequestValidationInput, error) {
	route, params, err := v.router.FindRoute(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w (%v)", req.Method, req.URL.Path, ErrNoRoute, err)
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: options()}, nil
}

// ValidateRequest validates a request whose body (already read) is body:
// its path and method, parameters, credentials and body.
func (v *Validator) ValidateRequest(req *http.Request, body []byte) error {
	in, err := v.input(req, body)
	if err != nil {
		return err
	}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
		return fmt.Errorf("request %s %s: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// ValidateResponse validates the answer to a request (whose body was
// reqBody): its status must be one the operation documents, its headers and
// body must match.
func (v *Validator) ValidateResponse(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	return v.validateResponse(req, reqBody, status, header, body, false)
}

// validateResponse is ValidateResponse, without the body when stream (an
// event stream, whose events are checked one by one as they are read).
func (v *Validator) validateResponse(req *http.Request, reqBody []byte, status int, header http.Header, body []byte, stream bool) error {
	in, err := v.input(req, reqBody)
	if err != nil {
		return err
	}
	o := options()
	o.ExcludeResponseBody = stream
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header, Options: o}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		return fmt.Errorf("answer %d to %s %s: %w", status, req.Method, req.URL.Path, err)
	}
	return nil
}

// ValidateSchema validates a JSON value against one of the document's
// component schemas (e.g. "Error", "RunEvent").
func (v *Validator) ValidateSchema(name string, data []byte) error {
	ref := v.doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("no schema %q in the document", name)
	}
	var value any
	if err := json.Unmarshal(data, &value); err != nil {
		return fmt.Errorf("%s: not JSON: %w", name, err)
	}
	if err := v.doc.ValidateSchemaJSON(ref.Value, value, openapi3.EnableJSONSchema2020(), openapi3.SetSchemaErrorMessageCustomizer(func(err *openapi3.SchemaError) string {
		return fmt.Sprintf("at /%s: %s", strings.Join(err.JSONPointer(), "/"), err.Reason)
	})); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
