// Package spec holds Daytona's published API descriptions, copied unchanged
// from ../shared/vendor-specs/daytona (daytonaio/daytona v0.190.0,
// libs/api-client-go/api/openapi.yaml and
// libs/toolbox-api-client-go/api/openapi.yaml, Apache-2.0, LICENSE here):
// the API (api-openapi.yaml: sandboxes, preview URLs, the toolbox proxied
// under /toolbox/{sandboxId}/toolbox/…) and the toolbox daemon inside every
// sandbox (toolbox-openapi.yaml: process, files, computer use), reached at
// {toolboxProxyUrl}/{sandboxId}/….
//
// Validator holds traffic to one description; Checker (transport.go) puts
// both between a client and a server (the adapter or the vendor's SDK, and
// the emulator) so that a route, a field or a status the vendor does not
// publish fails the test.
package spec

import (
	"embed"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
)

// Files holds the vendor's files as copied.
//
//go:embed LICENSE api-openapi.yaml toolbox-openapi.yaml
var Files embed.FS

// Names of the two OpenAPI descriptions in Files.
const (
	APIFile     = "api-openapi.yaml"
	ToolboxFile = "toolbox-openapi.yaml"
)

// Validator validates requests and responses against one OpenAPI
// description (vendorkit.Validator).
type Validator = vendorkit.Validator

// API loads the API's description (api-openapi.yaml).
func API() (*Validator, error) { return Load(APIFile) }

// Toolbox loads the toolbox's description (toolbox-openapi.yaml).
func Toolbox() (*Validator, error) { return Load(ToolboxFile) }

// Load loads one of the embedded OpenAPI descriptions.
func Load(name string) (*Validator, error) {
	data, err := Files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return vendorkit.LoadValidator(name, data, openapi3.DisableExamplesValidation())
}
