package osworld

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"strings"

	"github.com/open-bot/computer/pkg/shared"
)

// The accessibility tree in OSWorld's Linux shape (its guest's
// _create_atspi_node): a desktop-frame root, one element per application,
// element tags the AT-SPI role names with '-' for spaces, the accessible
// name as attribute name, states as st:<state>="true", the screen box as
// cp:screencoord="(x, y)" and cp:size="(w, h)" (only on visible, showing
// nodes), a field's text as element text. Ours is flat under each
// application (the element list is a list): the browser's DOM elements
// under "Chromium", the desktop's AT-SPI elements under "desktop".

// Namespaces of OSWorld's Ubuntu tree.
const (
	nsBase = "https://accessibility.ubuntu.example.org/ns/"
	nsSt   = nsBase + "state"
	nsAttr = nsBase + "attributes"
	nsCp   = nsBase + "component"
	nsVal  = nsBase + "value"
)

// atspiRoles maps the element list's roles (ARIA's for the browser,
// AT-SPI's already for the desktop) onto AT-SPI role names.
var atspiRoles = map[string]string{
	"button": "push-button", "clickable": "push-button", "link": "link", "textbox": "entry", "searchbox": "entry",
	"checkbox": "check-box", "radio": "radio-button", "combobox": "combo-box", "listbox": "list-box",
	"option": "list-item", "menuitem": "menu-item", "menuitemcheckbox": "check-menu-item", "menuitemradio": "radio-menu-item",
	"tab": "page-tab", "tablist": "page-tab-list", "slider": "slider", "spinbutton": "spin-button", "switch": "toggle-button",
	"heading": "heading", "img": "image", "image": "image", "textarea": "entry", "treeitem": "tree-item",
}

func atspiRole(r string) string {
	r = strings.ToLower(strings.TrimSpace(r))
	if v, ok := atspiRoles[r]; ok {
		return v
	}
	if r == "" {
		return "unknown"
	}
	return strings.NewReplacer(" ", "-", "_", "-").Replace(r)
}

// TreeXML renders elements as OSWorld's accessibility tree.
func TreeXML(els []shared.Element) string {
	var b strings.Builder
	b.WriteString(`<desktop-frame xmlns:st="` + nsSt + `" xmlns:attr="` + nsAttr + `" xmlns:cp="` + nsCp + `" xmlns:val="` + nsVal + `" name="main">`)
	groups := []struct {
		name string
		of   func(shared.Element) bool
	}{
		{"Chromium", func(e shared.Element) bool { return strings.HasPrefix(e.ID, "e") }},
		{"desktop", func(e shared.Element) bool { return !strings.HasPrefix(e.ID, "e") }},
	}
	for _, g := range groups {
		var n int
		for _, e := range els {
			if g.of(e) {
				n++
			}
		}
		if n == 0 {
			continue
		}
		fmt.Fprintf(&b, `<application name="%s" st:visible="true" st:showing="true" st:enabled="true">`, esc(g.name))
		for _, e := range els {
			if g.of(e) {
				writeElement(&b, e)
			}
		}
		b.WriteString(`</application>`)
	}
	b.WriteString(`</desktop-frame>`)
	return b.String()
}

func writeElement(b *strings.Builder, e shared.Element) {
	tag := atspiRole(e.Role)
	if !isName(tag) || tag[0] < 'a' {
		tag = "unknown"
	}
	fmt.Fprintf(b, `<%s name="%s" attr:id="%s" attr:role="%s"`, tag, esc(e.Name), esc(e.ID), esc(e.Role))
	disabled := false
	for _, st := range e.States {
		st = strings.ToLower(strings.NewReplacer(" ", "-", "_", "-").Replace(st))
		if st == "disabled" {
			disabled = true
			continue
		}
		if isName(st) {
			fmt.Fprintf(b, ` st:%s="true"`, st)
		}
	}
	// Listed elements are the visible ones, on screen.
	b.WriteString(` st:visible="true" st:showing="true"`)
	if !disabled {
		b.WriteString(` st:enabled="true" st:sensitive="true"`)
	}
	if tag == "entry" {
		b.WriteString(` st:editable="true"`)
	}
	fmt.Fprintf(b, ` cp:screencoord="(%d, %d)" cp:size="(%d, %d)">`, e.Box.X, e.Box.Y, e.Box.W, e.Box.H)
	text := e.Name
	if e.Value != nil {
		text = *e.Value
	}
	b.WriteString(esc(text))
	fmt.Fprintf(b, `</%s>`, tag)
}

// isName reports whether s is a safe XML name part.
func isName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return strings.ReplaceAll(b.String(), `"`, "&#34;")
}

// accessibility is GET /accessibility: {"AT": xml}.
func (s *Service) accessibility(c *call) error {
	obs, err := s.observe(c, true)
	if err != nil {
		return err
	}
	var els []shared.Element
	if len(obs.Elements) > 0 {
		if err := json.Unmarshal(obs.Elements, &els); err != nil {
			return err
		}
	}
	return c.json(http.StatusOK, map[string]string{"AT": TreeXML(els)})
}
