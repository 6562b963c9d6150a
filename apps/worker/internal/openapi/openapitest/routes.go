package openapitest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// Routes lists the patterns registered on mux ("METHOD /path/{wild}"), read
// from the mux itself: net/http has no API to list them, so Routes walks
// the ServeMux's routing index (every pattern is kept there, by segment or
// as a multi-segment pattern) by reflection, and then asks the mux to route
// a request made from each pattern, which must come back to that pattern.
// A Go release that reshapes the ServeMux makes it fail loudly, never list
// nothing.
func Routes(mux *http.ServeMux) ([]string, error) {
	idx := reflect.ValueOf(mux).Elem().FieldByName("index")
	if !idx.IsValid() {
		return nil, fmt.Errorf("http.ServeMux has no routing index in this Go release: update openapitest.Routes")
	}
	segs, multis := idx.FieldByName("segments"), idx.FieldByName("multis")
	if !segs.IsValid() || !multis.IsValid() || segs.Kind() != reflect.Map || multis.Kind() != reflect.Slice {
		return nil, fmt.Errorf("http.ServeMux's routing index changed shape in this Go release: update openapitest.Routes")
	}
	seen := map[string]bool{}
	add := func(list reflect.Value) error {
		for i := range list.Len() {
			p := list.Index(i)
			if p.Kind() == reflect.Pointer {
				p = p.Elem()
			}
			str := p.FieldByName("str")
			if !str.IsValid() || str.Kind() != reflect.String {
				return fmt.Errorf("http.ServeMux's patterns changed shape in this Go release: update openapitest.Routes")
			}
			seen[str.String()] = true
		}
		return nil
	}
	for it := segs.MapRange(); it.Next(); {
		if err := add(it.Value()); err != nil {
			return nil, err
		}
	}
	if err := add(multis); err != nil {
		return nil, err
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("no pattern found on the mux")
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		if err := routesBack(mux, p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// routesBack checks that a request made from pattern p is routed to p.
func routesBack(mux *http.ServeMux, p string) error {
	method, path, ok := strings.Cut(p, " ")
	if !ok {
		method, path = http.MethodGet, p
	}
	if strings.HasSuffix(path, "/") {
		path += "x"
	}
	path = wildcard.ReplaceAllStringFunc(path, func(string) string { return "w1" })
	_, got := mux.Handler(httptest.NewRequest(method, path, nil))
	if got != p {
		return fmt.Errorf("the mux routes %s %s to %q, not to the pattern %q read from it", method, path, got, p)
	}
	return nil
}

// Compare holds the router's /v1 patterns to the document: the routes the
// document lacks, and the documented operations the router lacks (both as
// "METHOD /path"; a path matches when it is the same string, so the mux's
// wildcards must be named as the document's parameters). A /v1 pattern without a method is reported as lacking from
// the document (it answers every method).
func Compare(doc *openapi3.T, patterns []string) (undocumented, unrouted []string) {
	routed := map[string]bool{}
	for _, p := range patterns {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			method, path = "", p
		}
		if path != "/v1" && !strings.HasPrefix(path, "/v1/") {
			continue
		}
		key := method + " " + path
		routed[key] = true
		if item := doc.Paths.Value(path); method == "" || item == nil || item.GetOperation(method) == nil {
			undocumented = append(undocumented, key)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			key := method + " " + path
			if !routed[key] {
				unrouted = append(unrouted, key)
			}
		}
	}
	sort.Strings(undocumented)
	sort.Strings(unrouted)
	return undocumented, unrouted
}
