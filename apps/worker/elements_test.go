package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/pkg/shared"
)

// Displays 1320-1321 and view ports 33100-33103 are this test's alone.
const (
	elementsDisplayBase = 1320
	elementsViewPorts   = "VIEW_PORT_BASE=33100"
)

// elementsOf reads the elements out of a computer_observe/computer_act
// output's text (its JSON metadata object).
func elementsOf(text string) []shared.Element {
	i := strings.Index(text, "{\"")
	if i < 0 {
		return nil
	}
	var meta struct {
		Elements []shared.Element `json:"elements"`
	}
	_ = json.NewDecoder(strings.NewReader(text[i:])).Decode(&meta)
	return meta.Elements
}

func elementID(els []shared.Element, role, name string) string {
	for _, e := range els {
		if e.Role == role && e.Name == name {
			return e.ID
		}
	}
	return ""
}

// TestElementsFormTask: a scripted teammate completes a form by element
// ids alone, through Codex and the worker's tools: it observes with
// elements, types into the fields and ticks a box by id, submits by id,
// and the site receives exactly what it typed. No action carries a
// coordinate.
func TestElementsFormTask(t *testing.T) {
	var mu sync.Mutex
	var got url.Values
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.URL.Path == "/submit" {
			_ = r.ParseForm()
			mu.Lock()
			got = r.PostForm
			mu.Unlock()
			fmt.Fprint(w, `<!doctype html><title>thanks</title><h1>Thanks!</h1>`)
			return
		}
		fmt.Fprint(w, `<!doctype html><title>signup</title><body style="font:16px sans-serif">
<h1>Join the club</h1>
<form method="post" action="/submit">
<p><label for="n">Full name</label> <input id="n" name="name"></p>
<p><label for="m">Email</label> <input id="m" name="email" type="email"></p>
<p><label><input type="checkbox" name="terms" value="yes"> I accept the terms</label></p>
<p><button type="submit">Join</button></p>
</form></body>`)
	}))
	defer site.Close()

	var actArgs []map[string]any
	script := func(outs []mockmodel.Output) mockmodel.Step {
		if n := len(outs); n > 0 && strings.HasPrefix(outs[n-1].Text, "results:") {
			return mockmodel.Step{Message: "submitted: " + strings.SplitN(outs[n-1].Text, "\n", 2)[0]}
		}
		switch len(outs) {
		case 0:
			return mockmodel.Step{Tool: "open_path", Args: map[string]any{"target": site.URL + "/"}}
		case 1, 2, 3, 4, 5, 6:
			// Observe with elements until the form is there.
			if len(outs) > 1 {
				els := elementsOf(outs[len(outs)-1].Text)
				name, email := elementID(els, "textbox", "Full name"), elementID(els, "textbox", "Email")
				terms, join := elementID(els, "checkbox", "I accept the terms"), elementID(els, "button", "Join")
				if name != "" && email != "" && terms != "" && join != "" {
					args := map[string]any{"elements": true, "actions": []map[string]any{
						{"type": "type", "element": name, "text": "Ada Lovelace"},
						{"type": "type", "element": email, "text": "ada@example.org"},
						{"type": "click", "element": terms},
						{"type": "click", "element": join},
					}}
					actArgs = append(actArgs, args)
					return mockmodel.Step{Tool: "computer_act", Args: args}
				}
			}
			return mockmodel.Step{Tool: "computer_observe", Args: map[string]any{"elements": true}}
		}
		return mockmodel.Step{Message: "gave up: " + outs[len(outs)-1].Text}
	}
	model := mockmodel.New(script).RequireKey(scriptedKey)
	modelSrv := httptest.NewServer(model)
	defer modelSrv.Close()
	c := startComputer(t, modelSrv.URL, elementsDisplayBase, elementsViewPorts, "EGRESS_ALLOW=127.0.0.1/32")
	e := startWorker(t, c, "alice")

	id := e.startRun(t, "alice", "Sign Ada up on the page, using element ids.")
	final, _ := waitRun(t, e, id, 4*time.Minute)
	require.Equal(t, runs.StatusCompleted, final.Status, "%+v", final)
	require.Len(t, actArgs, 1, "the teammate acted once, by element ids")
	b, _ := json.Marshal(actArgs[0])
	require.NotContains(t, string(b), `"x"`)
	require.NotContains(t, string(b), `"y"`)
	mu.Lock()
	defer mu.Unlock()
	require.NotNil(t, got, "the form was not submitted")
	require.Equal(t, "Ada Lovelace", got.Get("name"))
	require.Equal(t, "ada@example.org", got.Get("email"))
	// What the act reported of each action, so a failure says which one
	// missed (rehearsal 60: the form came without the checkbox once).
	acted := ""
	for _, tc := range final.ToolCalls {
		if tc.Tool == "computer_act" {
			acted = tc.Output
			if len(acted) > 2000 {
				acted = acted[:2000]
			}
		}
	}
	require.Equal(t, "yes", got.Get("terms"), "the checkbox was not checked when the form was posted; the act's results: %s", acted)
}
