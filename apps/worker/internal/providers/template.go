package providers

import (
	"net/http"
	"sort"
	"strings"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
	"github.com/open-bot/computer/pkg/shared"
)

// Templater is a provider whose computers are made from one of several
// templates, chosen per computer (e2b: open-bot, botd in the sandbox; or
// desktop, the vendor's stock desktop driven by commands).
type Templater interface {
	// Templates are the names a create may give, and the one a create
	// that names none gets.
	Templates() (names []string, def string)
}

// CheckTemplate validates a create's template for provider p of kind and
// returns the one the computer keeps: a Templater's named template, or its
// default for ""; for any other provider only "" (it has no templates).
// A refusal is a 400 TEMPLATE_UNAVAILABLE saying what the provider has.
func CheckTemplate(p Provider, kind, name string) (string, error) {
	t, ok := p.(Templater)
	if !ok {
		if name == "" {
			return "", nil
		}
		return "", shared.Errorf(http.StatusBadRequest, shared.CodeTemplateUnavailable,
			"template: the %s provider has no templates (only e2b and daytona computers take one); leave template out", kind)
	}
	names, def := t.Templates()
	if name == "" {
		return def, nil
	}
	for _, n := range names {
		if n == name {
			return name, nil
		}
	}
	names = append([]string(nil), names...)
	sort.Strings(names)
	return "", shared.Errorf(http.StatusBadRequest, shared.CodeTemplateUnavailable,
		"template %q: the %s provider has %s", name, kind, strings.Join(names, ", "))
}

// Templates: open-bot (botd in the sandbox, a template built from the
// computer image), desktop (the vendor's stock desktop) and the worker's
// E2B_TEMPLATE, its default.
func (x *E2B) Templates() ([]string, string) {
	def := x.p.DefaultTemplate()
	names := []string{e2b.DefaultTemplate, e2b.DesktopTemplate}
	if def != e2b.DefaultTemplate && def != e2b.DesktopTemplate {
		names = append(names, def)
	}
	return names, def
}

var _ Templater = (*E2B)(nil)
