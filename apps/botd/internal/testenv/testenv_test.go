package testenv

import "testing"

// TestCIMeansExactlyCITrue: only CI=true turns skips into failures. CI=1 (or
// any other value some runners set) does not: .ci/run sets CI=true, and a
// laptop that happens to export CI=1 must still skip what it cannot run.
func TestCIMeansExactlyCITrue(t *testing.T) {
	for v, want := range map[string]bool{"true": true, "1": false, "yes": false, "TRUE": false, "": false, "false": false} {
		t.Setenv("CI", v)
		if got := CI(); got != want {
			t.Errorf("CI=%q: CI() = %v, want %v", v, got, want)
		}
	}
}
