// Package agentsandbox holds Kubernetes SIG Apps agent-sandbox's
// CustomResourceDefinitions as published (crds/, from
// kubernetes-sigs/agent-sandbox helm/crds/ @ 2fd412d, Apache-2.0, LICENSE
// here; ../shared/vendor-specs/agent-sandbox) and checks an object against
// their OpenAPI v3 schemas before the kubernetes provider sends it: what
// the API server checks once the CRDs are installed, here also where they
// are not yet.
package agentsandbox

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

//go:embed LICENSE crds/*.yaml
var Files embed.FS

// The resources the provider uses, at the version it writes.
var (
	Sandboxes         = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	SandboxTemplates  = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
	SandboxClaims     = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}
	SandboxWarmPools  = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
	APIVersionAgents  = "agents.x-k8s.io/v1beta1"
	APIVersionExtends = "extensions.agents.x-k8s.io/v1beta1"
)

// CRDs returns the CustomResourceDefinition documents (YAML), by file name.
func CRDs() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := fs.WalkDir(Files, "crds", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := Files.ReadFile(p)
		out[strings.TrimPrefix(p, "crds/")] = b
		return err
	})
	return out, err
}

type crd struct {
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind string `json:"kind"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Schema struct {
				OpenAPIV3Schema json.RawMessage `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

var (
	loadOnce sync.Once
	schemas  map[string]*openapi3.Schema // "group/version Kind"
	loadErr  error
)

func load() {
	schemas = map[string]*openapi3.Schema{}
	docs, err := CRDs()
	if err != nil {
		loadErr = err
		return
	}
	for name, y := range docs {
		var c crd
		if err := yaml.Unmarshal(y, &c); err != nil {
			loadErr = fmt.Errorf("agentsandbox: %s: %w", name, err)
			return
		}
		for _, v := range c.Spec.Versions {
			var s openapi3.Schema
			if err := json.Unmarshal(v.Schema.OpenAPIV3Schema, &s); err != nil {
				loadErr = fmt.Errorf("agentsandbox: %s %s: %w", name, v.Name, err)
				return
			}
			schemas[c.Spec.Group+"/"+v.Name+" "+c.Spec.Names.Kind] = &s
		}
	}
}

// Validate checks obj (an object as sent: apiVersion, kind, metadata,
// spec…) against its CRD's schema for its apiVersion and kind.
func Validate(obj map[string]any) error {
	loadOnce.Do(load)
	if loadErr != nil {
		return loadErr
	}
	av, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	s := schemas[av+" "+kind]
	if s == nil {
		return fmt.Errorf("agentsandbox: no schema for %s %s", av, kind)
	}
	// Through JSON: the schema checks JSON values (numbers as float64).
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if err := s.VisitJSON(v, openapi3.MultiErrors()); err != nil {
		return fmt.Errorf("agentsandbox: %s %s does not match the published schema: %w", av, kind, err)
	}
	return nil
}
