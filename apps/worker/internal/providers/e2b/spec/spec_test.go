package spec

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestLoadAndValidate(t *testing.T) {
	cp, err := ControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Envd(); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/sandboxes", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", "k")
	if err := cp.ValidateRequest(req, []byte(`{"templateID":"base","timeout":60}`)); err != nil {
		t.Fatalf("a published request fails: %v", err)
	}
	if err := cp.ValidateRequest(req, []byte(`{"templateID":"base","timeoutSeconds":60}`)); err == nil || !strings.Contains(err.Error(), "timeoutSeconds") {
		t.Fatalf("an unpublished field passes: %v", err)
	}
	bad := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/sandboxes/x/explode", nil)
	bad.Header.Set("X-API-Key", "k")
	if err := cp.ValidateRequest(bad, nil); err == nil {
		t.Fatal("an unpublished route passes")
	}
	get := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/sandboxes/abc", nil)
	get.Header.Set("X-API-Key", "k")
	h := http.Header{"Content-Type": {"application/json"}}
	if err := cp.ValidateResponse(get, nil, http.StatusNotFound, h, []byte(`{"code":404,"message":"sandbox \"abc\" not found"}`)); err != nil {
		t.Fatalf("a published error fails: %v", err)
	}
	if err := cp.ValidateResponse(get, nil, http.StatusTeapot, h, []byte(`{"code":418,"message":"no"}`)); err == nil {
		t.Fatal("an unpublished status passes")
	}
}
