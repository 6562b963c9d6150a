// Package spec holds E2B's published API descriptions, copied unchanged from
// ../shared/vendor-specs/e2b (e2b-dev/E2B spec/, Apache-2.0, LICENSE here):
// the control plane (openapi.yml), envd's HTTP side (envd/envd.yaml) and
// envd's two Connect-RPC services (envd/process/process.proto,
// envd/filesystem/filesystem.proto, from which ../envd is generated).
//
// Validator holds traffic to the two OpenAPI descriptions: tests put it
// between a client and a server (the adapter and the emulator) so that a
// route, a field or a status the vendor does not publish fails the test.
package spec

import (
	"embed"

	"github.com/open-bot/computer/apps/worker/internal/providers/vendorkit"
)

// Files holds the vendor's files as copied (paths as in the vendor's spec/).
//
//go:embed LICENSE openapi.yml envd/envd.yaml envd/process/process.proto envd/filesystem/filesystem.proto
var Files embed.FS

// Names of the two OpenAPI descriptions in Files.
const (
	ControlPlaneFile = "openapi.yml"
	EnvdFile         = "envd/envd.yaml"
)

// Validator validates requests and responses against one OpenAPI
// description (vendorkit.Validator).
type Validator = vendorkit.Validator

// ControlPlane loads the control plane's description (openapi.yml).
func ControlPlane() (*Validator, error) { return Load(ControlPlaneFile) }

// Envd loads envd's HTTP description (envd/envd.yaml).
func Envd() (*Validator, error) { return Load(EnvdFile) }

// Load loads one of the embedded OpenAPI descriptions.
func Load(name string) (*Validator, error) {
	data, err := Files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return vendorkit.LoadValidator(name, data)
}
