package vendorkit

// Validator holds traffic to one vendor's OpenAPI description: tests put it
// (through each vendor's spec.Checker) between a client and a server (the
// adapter or the vendor's SDK, and the emulator) so that a route, a field
// or a status the vendor does not publish fails the test.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Validator validates requests and responses against one OpenAPI description.
type Validator struct {
	name   string
	doc    *openapi3.T
	router routers.Router
}

// LoadValidator parses data, the OpenAPI description called name, checks
// it (opts: what the vendor's own file needs relaxed, e.g.
// openapi3.DisableExamplesValidation()) and drops its servers so that
// routes match whatever host the traffic went to (an emulator on loopback,
// the vendor's cloud).
func LoadValidator(name string, data []byte, opts ...openapi3.ValidationOption) (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("spec %s: %w", name, err)
	}
	if err := doc.Validate(loader.Context, opts...); err != nil {
		return nil, fmt.Errorf("spec %s: %w", name, err)
	}
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("spec %s: router: %w", name, err)
	}
	return &Validator{name: name, doc: doc, router: router}, nil
}

// Doc is the loaded description.
func (v *Validator) Doc() *openapi3.T { return v.doc }

func (v *Validator) options() *openapi3filter.Options {
	o := &openapi3filter.Options{
		IncludeResponseStatus:             true,
		RejectWhenRequestBodyNotSpecified: true,
		SkipSettingDefaults:               true,
		AuthenticationFunc:                requireCredential,
	}
	// Say where and why, never the value: bodies carry access tokens.
	o.WithCustomSchemaErrorFunc(func(err *openapi3.SchemaError) string {
		return fmt.Sprintf("at /%s: %s", strings.Join(err.JSONPointer(), "/"), err.Reason)
	})
	return o
}

// requireCredential accepts a security scheme when the request carries its
// credential (presence only: whether the key is right is the server's call,
// and a 401 answer is then validated as a response).
func requireCredential(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s := in.SecurityScheme
	req := in.RequestValidationInput.Request
	switch {
	case s.Type == "apiKey" && s.In == "header" && s.Name == "Authorization":
		// A "Bearer" scheme written as an API key (Daytona's toolbox): an
		// Authorization header that starts with "Bearer ".
		if !strings.HasPrefix(strings.ToLower(req.Header.Get(s.Name)), "bearer ") {
			return fmt.Errorf("no Bearer authorization")
		}
	case s.Type == "apiKey" && s.In == "header":
		if req.Header.Get(s.Name) == "" {
			return fmt.Errorf("no %s header", s.Name)
		}
	case s.Type == "apiKey" && s.In == "query":
		if req.URL.Query().Get(s.Name) == "" {
			return fmt.Errorf("no %s query parameter", s.Name)
		}
	case s.Type == "http":
		if !strings.HasPrefix(strings.ToLower(req.Header.Get("Authorization")), strings.ToLower(s.Scheme)+" ") {
			return fmt.Errorf("no %s authorization", s.Scheme)
		}
	default:
		return fmt.Errorf("security scheme %s/%s not checked", s.Type, s.In)
	}
	return nil
}

// Route finds the operation a request is for; an unpublished path or method
// is an error.
func (v *Validator) Route(req *http.Request) (*routers.Route, map[string]string, error) {
	route, params, err := v.router.FindRoute(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %s %s: %w", v.name, req.Method, req.URL.Path, err)
	}
	return route, params, nil
}

func (v *Validator) input(req *http.Request, body []byte) (*openapi3filter.RequestValidationInput, error) {
	route, params, err := v.Route(req)
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return &openapi3filter.RequestValidationInput{
		Request: r, PathParams: params, Route: route, Options: v.options(),
	}, nil
}

// ValidateRequest validates a request whose body (already read) is body: the
// route and method must be published, the parameters, security and body must
// match, and a JSON body must carry no property its schema does not name.
func (v *Validator) ValidateRequest(req *http.Request, body []byte) error {
	return v.validateRequest(req, body, true)
}

// ValidateRequestLoose is ValidateRequest without the check for properties
// the schema does not name (for a request checked against an aliased route,
// whose published schema is the closest, not the exact, one).
func (v *Validator) ValidateRequestLoose(req *http.Request, body []byte) error {
	return v.validateRequest(req, body, false)
}

func (v *Validator) validateRequest(req *http.Request, body []byte, strictFields bool) error {
	in, err := v.input(req, body)
	if err != nil {
		return err
	}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
		return fmt.Errorf("%s: request %s %s: %w", v.name, req.Method, req.URL.Path, err)
	}
	if op := in.Route.Operation; strictFields && op.RequestBody != nil && op.RequestBody.Value != nil && len(body) > 0 {
		if err := unknownJSON(op.RequestBody.Value.Content, req.Header.Get("Content-Type"), body); err != nil {
			return fmt.Errorf("%s: request %s %s: %w", v.name, req.Method, req.URL.Path, err)
		}
	}
	return nil
}

// ValidateResponse validates the answer (status, header, body) to a request
// (whose body was reqBody): the status must be one the operation publishes,
// the body must match its schema, and a JSON body must carry no property the
// schema does not name.
func (v *Validator) ValidateResponse(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	in, err := v.input(req, reqBody)
	if err != nil {
		return err
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header, Options: v.options(),
	}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		return fmt.Errorf("%s: response %d to %s %s: %w", v.name, status, req.Method, req.URL.Path, err)
	}
	if resp := in.Route.Operation.Responses.Status(status); resp != nil && resp.Value != nil && len(body) > 0 {
		if err := unknownJSON(resp.Value.Content, header.Get("Content-Type"), body); err != nil {
			return fmt.Errorf("%s: response %d to %s %s: %w", v.name, status, req.Method, req.URL.Path, err)
		}
	}
	return nil
}

// unknownJSON reports the properties of a JSON body its schema does not name
// (kin-openapi accepts them unless a schema says additionalProperties: false,
// which vendors' schemas rarely do).
func unknownJSON(content openapi3.Content, contentType string, body []byte) error {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	media := content.Get(mt)
	if media == nil || media.Schema == nil {
		return nil
	}
	var value any
	if err := json.Unmarshal(body, &value); err != nil {
		return err
	}
	var unknown []string
	walkUnknown(media.Schema, value, "", &unknown)
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("properties the schema does not name: %s", strings.Join(unknown, ", "))
	}
	return nil
}

// walkUnknown collects the properties of value no schema in ref (its own
// properties, allOf, anyOf, oneOf) names, recursing into known properties,
// additionalProperties and array items.
func walkUnknown(ref *openapi3.SchemaRef, value any, at string, unknown *[]string) {
	if ref == nil || ref.Value == nil {
		return
	}
	switch v := value.(type) {
	case map[string]any:
		props := map[string][]*openapi3.SchemaRef{}
		var extra []*openapi3.SchemaRef
		open := false
		collect(ref, props, &extra, &open, 0)
		for key, val := range v {
			path := at + "." + key
			if subs, ok := props[key]; ok {
				for _, s := range subs {
					walkUnknown(s, val, path, unknown)
				}
				continue
			}
			if len(extra) > 0 {
				for _, s := range extra {
					walkUnknown(s, val, path, unknown)
				}
				continue
			}
			if !open {
				*unknown = append(*unknown, strings.TrimPrefix(path, "."))
			}
		}
	case []any:
		items := itemSchemas(ref, 0)
		for i, val := range v {
			for _, s := range items {
				walkUnknown(s, val, fmt.Sprintf("%s[%d]", at, i), unknown)
			}
		}
	}
}

// collect gathers the named properties of a schema and its compositions;
// additionalProperties schemas go to extra, and a schema that names no
// properties at all (or allows any) leaves the object open.
func collect(ref *openapi3.SchemaRef, props map[string][]*openapi3.SchemaRef, extra *[]*openapi3.SchemaRef, open *bool, depth int) {
	if ref == nil || ref.Value == nil || depth > 16 {
		return
	}
	s := ref.Value
	for name, p := range s.Properties {
		props[name] = append(props[name], p)
	}
	if s.AdditionalProperties.Schema != nil {
		*extra = append(*extra, s.AdditionalProperties.Schema)
	} else if s.AdditionalProperties.Has != nil && *s.AdditionalProperties.Has {
		*open = true
	}
	comps := append(append(append([]*openapi3.SchemaRef{}, s.AllOf...), s.AnyOf...), s.OneOf...)
	if len(s.Properties) == 0 && len(comps) == 0 && s.AdditionalProperties.Schema == nil {
		*open = true // a free-form object
	}
	for _, c := range comps {
		collect(c, props, extra, open, depth+1)
	}
}

func itemSchemas(ref *openapi3.SchemaRef, depth int) []*openapi3.SchemaRef {
	if ref == nil || ref.Value == nil || depth > 16 {
		return nil
	}
	var out []*openapi3.SchemaRef
	if ref.Value.Items != nil {
		out = append(out, ref.Value.Items)
	}
	for _, c := range append(append(append([]*openapi3.SchemaRef{}, ref.Value.AllOf...), ref.Value.AnyOf...), ref.Value.OneOf...) {
		out = append(out, itemSchemas(c, depth+1)...)
	}
	return out
}
