package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/open-bot/computer/apps/worker/internal/tools"
	"github.com/open-bot/computer/pkg/shared"
)

// ToolSpec is a tool as GET /v1/tools lists it.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

func (a *api) listTools(w http.ResponseWriter, r *http.Request) {
	out := make([]ToolSpec, 0, len(tools.All))
	for _, t := range tools.All {
		if t.Name == "request_takeover" {
			continue // only inside a run
		}
		out = append(out, ToolSpec{Name: t.Name, Description: t.Description, InputSchema: json.RawMessage(t.Schema)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"tools": out})
}

// callTool is the direct tool API for other harnesses:
// POST /v1/computers/{id}/tools/{name} {"botId":"…","args":{…}}. The bot must
// be on the computer; screens follow the namespace rule. A direct call is
// one-shot: its screen lease is given back at once.
func (a *api) callTool(w http.ResponseWriter, r *http.Request) {
	var req struct {
		BotID string          `json:"botId"`
		Args  json.RawMessage `json:"args"`
	}
	if !decodeMax(w, r, &req, maxToolBody) {
		return
	}
	name := r.PathValue("name")
	if t, ok := tools.Find(name); !ok || t.Name == "request_takeover" {
		writeErr(w, http.StatusNotFound, shared.CodeNotFound, "no such tool")
		return
	}
	cid := r.PathValue("id")
	c, err := a.o.Computers.HasBot(r.Context(), cid, req.BotID)
	if err != nil {
		fail(w, err)
		return
	}
	machine, err := a.o.Computers.Machine(r.Context(), cid)
	if err != nil {
		fail(w, err)
		return
	}
	sess, err := tools.NewSession(machine, req.BotID, "harness-"+req.BotID)
	if err != nil {
		writeErr(w, http.StatusBadRequest, shared.CodeInvalidID, err.Error())
		return
	}
	sess.CheckScreen = machine.CheckScreen
	sess.Secret, sess.SecretNames = a.o.Computers.SecretOpener(cid)
	a.o.Computers.InstrumentTools(r.Context(), sess, c.ID, c.Provider)
	res := tools.Call(r.Context(), sess, name, req.Args)
	sess.Release(r.Context())
	writeJSON(w, res.Status, res)
}
