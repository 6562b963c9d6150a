package osworld

import (
	"encoding/xml"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/pkg/shared"
)

// TestTreeXML: the tree parses as XML in OSWorld's namespaces, a button is
// a push-button with its name, states and box as OSWorld's agents read
// them, text is escaped, and an odd role still makes a valid tag.
func TestTreeXML(t *testing.T) {
	v := `a<b>&"c"`
	x := TreeXML([]shared.Element{
		{ID: "e12", Role: "button", Name: `Go & "run"`, States: []string{"focused"}, Box: shared.Box{X: 10, Y: 20, W: 30, H: 40}},
		{ID: "e13", Role: "textbox", Name: "q", Value: &v, Box: shared.Box{X: 1, Y: 2, W: 3, H: 4}},
		{ID: "d00000000ab", Role: "push button", Name: "OK", States: []string{"disabled"}},
		{ID: "e14", Role: "weird role!<>", Name: "x"},
	})
	type node struct {
		XMLName xml.Name
		Attrs   []xml.Attr `xml:",any,attr"`
		Text    string     `xml:",chardata"`
		Kids    []node     `xml:",any"`
	}
	var root node
	require.NoError(t, xml.Unmarshal([]byte(x), &root), x)
	require.Equal(t, "desktop-frame", root.XMLName.Local)
	attr := func(n node, space, local string) string {
		for _, a := range n.Attrs {
			if a.Name.Space == space && a.Name.Local == local {
				return a.Value
			}
		}
		return ""
	}
	var buttons, entries []node
	var tags []string
	for _, app := range root.Kids {
		require.Equal(t, "application", app.XMLName.Local)
		for _, k := range app.Kids {
			tags = append(tags, k.XMLName.Local)
			switch k.XMLName.Local {
			case "push-button":
				buttons = append(buttons, k)
			case "entry":
				entries = append(entries, k)
			}
		}
	}
	require.Equal(t, []string{"push-button", "entry", "unknown", "push-button"}, tags)
	require.Equal(t, `Go & "run"`, attr(buttons[0], "", "name"))
	require.Equal(t, "true", attr(buttons[0], nsSt, "focused"))
	require.Equal(t, "true", attr(buttons[0], nsSt, "enabled"))
	require.Equal(t, "(10, 20)", attr(buttons[0], nsCp, "screencoord"))
	require.Equal(t, "(30, 40)", attr(buttons[0], nsCp, "size"))
	require.Equal(t, "", attr(buttons[1], nsSt, "enabled"), "a disabled element is not enabled")
	require.Equal(t, v, strings.TrimSpace(entries[0].Text))
	require.Equal(t, "true", attr(entries[0], nsSt, "editable"))
}
