package agentsandbox

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestValidate: the published schemas load, a well-formed Sandbox passes,
// and what the schema forbids (a missing podTemplate, an operatingMode
// outside its enum, a claim without warmPoolRef) is refused.
func TestValidate(t *testing.T) {
	ok := map[string]any{
		"apiVersion": APIVersionAgents, "kind": "Sandbox",
		"metadata": map[string]any{"name": "ob-a-1"},
		"spec": map[string]any{
			"podTemplate":   map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "i"}}}},
			"operatingMode": "Running", "shutdownPolicy": "Retain", "service": true,
		},
	}
	require.NoError(t, Validate(ok))
	bad := func(mut func(spec map[string]any)) map[string]any {
		spec := map[string]any{}
		for k, v := range ok["spec"].(map[string]any) {
			spec[k] = v
		}
		mut(spec)
		return map[string]any{"apiVersion": APIVersionAgents, "kind": "Sandbox", "metadata": ok["metadata"], "spec": spec}
	}
	require.ErrorContains(t, Validate(bad(func(s map[string]any) { delete(s, "podTemplate") })), "podTemplate")
	require.ErrorContains(t, Validate(bad(func(s map[string]any) { s["operatingMode"] = "Paused" })), "operatingMode")
	require.ErrorContains(t, Validate(bad(func(s map[string]any) { s["service"] = "yes" })), "service")
	require.Error(t, Validate(map[string]any{"apiVersion": APIVersionExtends, "kind": "SandboxClaim", "metadata": map[string]any{"name": "c"}, "spec": map[string]any{}}), "a claim needs warmPoolRef")
	require.ErrorContains(t, Validate(map[string]any{"apiVersion": "agents.x-k8s.io/v9", "kind": "Sandbox"}), "no schema")
	docs, err := CRDs()
	require.NoError(t, err)
	require.Len(t, docs, 4)
}
