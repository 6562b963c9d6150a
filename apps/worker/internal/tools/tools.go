package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// MaxFileRead caps file_read output to what a model can use.
const MaxFileRead = 256 << 10

// Content is one item of a tool's output.
type Content struct {
	Type string `json:"type"` // "text" or "image"
	Text string `json:"text,omitempty"`
	// ImageURL is a data: URL (image/jpeg;base64) for images.
	ImageURL string `json:"imageUrl,omitempty"`
}

// Result is a tool call's outcome. A failed call still has content: the
// error text the model reads.
type Result struct {
	Success bool      `json:"success"`
	Content []Content `json:"content"`
	// Status is the HTTP status for the direct API (200 on success).
	Status int `json:"-"`
	// Code is a failed call's stable code (the one its text names), for
	// callers that carry it apart from the text (MCP); "" on success.
	Code shared.Code `json:"-"`
}

// Tool is one tool: its spec for the model and its implementation.
type Tool struct {
	Name        string
	Description string
	Schema      string
	// Graphical tools need a screen; they fail with MULTI_SCREEN_UNAVAILABLE
	// when none can be had, while shell and file tools keep working.
	Graphical bool
	run       func(ctx context.Context, s *Session, args json.RawMessage) ([]Content, error)
}

const screenProp = `"screen":{"type":"string","description":"Optional screen id: your bot id (default) or one starting with '<bot-id>-'."}`

// All is every tool, in the order offered to the model.
var All = []Tool{
	{Name: "computer_observe", Graphical: true,
		Description: "Take a screenshot of your screen (1280x800; coordinates in the image are screen pixels). With elements:true you also get the browser page's visible interactive and labelled elements as a list of {id, role, name, value?, states, box:{x,y,w,h}} in the same screen pixels (role clickable: a div or span the page made clickable, with no role of its own). Ask for elements when working in the browser (forms, buttons, links, menus): act on an element by its id instead of guessing pixels, and read names, values and states (checked, disabled, expanded) without zooming into the image. Ids stay the same while the page does not change; observe again after the page changes. Password values are never listed.",
		Schema:      `{"type":"object","properties":{"elements":{"type":"boolean","description":"Also list the page's visible interactive and labelled elements with ids you can act on."},` + screenProp + `},"additionalProperties":false}`,
		run:         observe},
	{Name: "computer_act", Graphical: true,
		Description: "Run a batch of desktop actions in order and return one screenshot at the end. Action types: click{x,y,button}, double_click{x,y}, drag{path:[{x,y},...]}, keypress{keys:[...]}, move{x,y}, screenshot{}, scroll{x,y,scroll_x,scroll_y} (pixels, positive y scrolls down), type{text}, wait{ms}; and window actions on a window id from computer_windows: focus_window{window}, close_window{window}, move_window{window,x,y} (the frame's top-left corner), resize_window{window,width,height} (the frame's size). click, double_click, move and scroll may name an element from your last computer_observe with elements:true instead of x and y ({\"type\":\"click\",\"element\":\"e12\"}); type with an element focuses it first ({\"type\":\"type\",\"element\":\"e7\",\"text\":\"hello\"}). Prefer element ids in the browser: they are resolved to the element's current centre when the action runs, and an element that is gone (element_stale), unknown (element_not_found), covered by something (element_covered) or scrolled off screen (element_offscreen) fails that action with its code instead of clicking the wrong thing; observe again then. Set elements:true to get the elements again with the final screenshot.",
		Schema:      `{"type":"object","properties":{"actions":{"type":"array","minItems":1,"maxItems":50,"items":{"type":"object","properties":{"type":{"type":"string","enum":["click","double_click","drag","keypress","move","screenshot","scroll","type","wait","focus_window","close_window","move_window","resize_window"]},"x":{"type":"integer"},"y":{"type":"integer"},"button":{"type":"string","enum":["left","right","middle"]},"path":{"type":"array","items":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"]}},"keys":{"type":"array","items":{"type":"string"}},"scroll_x":{"type":"integer"},"scroll_y":{"type":"integer"},"text":{"type":"string"},"ms":{"type":"integer"},"window":{"type":"string","description":"A window id from computer_windows (window actions only)."},"width":{"type":"integer"},"height":{"type":"integer"},"element":{"type":"string","description":"An element id from computer_observe with elements:true, instead of x and y."}},"required":["type"]}},"elements":{"type":"boolean","description":"Also list the page's elements with the final screenshot."},` + screenProp + `},"required":["actions"],"additionalProperties":false}`,
		run:         act},
	{Name: "computer_windows", Graphical: true,
		Description: "List the application windows on your screen, bottom to top: id, title, app, box {x,y,w,h} in screen pixels (the frame, title bar included), focused, minimized. Use it to find a window that is hidden or off to the side instead of hunting for it in screenshots, then focus, move, resize or close it with computer_act's window actions.",
		Schema:      `{"type":"object","properties":{` + screenProp + `},"additionalProperties":false}`,
		run:         windows},
	{Name: "clipboard_read", Graphical: true,
		Description: "Read your screen's clipboard text (what a paste there would insert; up to 1 MiB).",
		Schema:      `{"type":"object","properties":{` + screenProp + `},"additionalProperties":false}`,
		run:         clipboardRead},
	{Name: "clipboard_write", Graphical: true,
		Description: "Set your screen's clipboard text (up to 1 MiB), e.g. to paste a long text with ctrl+v instead of typing it.",
		Schema:      `{"type":"object","properties":{"text":{"type":"string"},` + screenProp + `},"required":["text"],"additionalProperties":false}`,
		run:         clipboardWrite},
	{Name: "open_path", Graphical: true,
		Description: "Open a URL in your screen's browser, or a workspace path (e.g. shared/report.pdf) in its desktop application.",
		Schema:      `{"type":"object","properties":{"target":{"type":"string"},` + screenProp + `},"required":["target"],"additionalProperties":false}`,
		run:         openPath},
	{Name: "launch_app", Graphical: true,
		Description: "Start a desktop application on your screen: browser, terminal, files or editor.",
		Schema:      `{"type":"object","properties":{"app":{"type":"string"},` + screenProp + `},"required":["app"],"additionalProperties":false}`,
		run:         launchApp},
	{Name: "browser_read_page", Graphical: true,
		Description: "Read the page in front of your screen's browser: its URL, title, text and links.",
		Schema:      `{"type":"object","properties":{` + screenProp + `},"additionalProperties":false}`,
		run:         readPage},
	{Name: "type_secret", Graphical: true,
		Description: "Type a secret from the computer's vault (a password, by its name) into the focused field of your screen's browser. You never see the value. It is typed only while the page in front, and every frame down to the focused field, is on the secret's own site; otherwise nothing is typed and you get an error. It goes only into a password field, unless its owner stored it as visible (then also a text field; the field is painted over in your screenshots); other fields refuse it with secret_field_refused. The field that received it never shows a value in elements. Click into the field first.",
		Schema:      `{"type":"object","properties":{"name":{"type":"string","description":"The secret's name in the vault."},` + screenProp + `},"required":["name"],"additionalProperties":false}`,
		run:         typeSecret},
	{Name: "shell",
		Description: "Run a command (an argv array, no shell unless you ask for one: [\"bash\",\"-lc\",\"...\"]) in the workspace as the bot user. cwd is workspace-relative (e.g. bots/<your-id>).",
		Schema:      `{"type":"object","properties":{"argv":{"type":"array","items":{"type":"string"},"minItems":1},"cwd":{"type":"string"},"timeoutMs":{"type":"integer","minimum":1,"maximum":600000}},"required":["argv"],"additionalProperties":false}`,
		run:         shell},
	{Name: "file_read",
		Description: "Read a workspace file (path relative to the workspace, e.g. bots/<your-id>/notes.md).",
		Schema:      `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`,
		run:         fileRead},
	{Name: "file_write",
		Description: "Write a workspace file (created or replaced), path relative to the workspace.",
		Schema:      `{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"],"additionalProperties":false}`,
		run:         fileWrite},
	{Name: "file_list",
		Description: "List a workspace folder (path relative to the workspace; \"\" for the root).",
		Schema:      `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`,
		run:         fileList},
	{Name: "request_takeover",
		Description: "Ask a person to take control of your screen (to sign in, pass a 2FA prompt, or decide). Waits until they hand it back.",
		Schema:      `{"type":"object","properties":{"reason":{"type":"string"},` + screenProp + `},"required":["reason"],"additionalProperties":false}`,
		run:         requestTakeover},
}

// Find returns the tool named name.
func Find(name string) (Tool, bool) {
	for _, t := range All {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Call runs tool name with args for s. It never panics on bad input: a
// malformed call is a failed Result the model can read.
func Call(ctx context.Context, s *Session, name string, args json.RawMessage) (res Result) {
	t, ok := Find(name)
	if !ok {
		return failed(&ToolError{Code: shared.CodeNotFound, Msg: fmt.Sprintf("no tool named %q", name)}, 404)
	}
	if s.Observe != nil {
		start := time.Now()
		defer func() { s.Observe(t.Name, res.Success, time.Since(start)) }()
	}
	if s.Trace != nil {
		var end func(bool, string)
		ctx, end = s.Trace(ctx, t.Name)
		defer func() { end(res.Success, string(res.Code)) }()
	}
	defer func() {
		if v := recover(); v != nil {
			res = failed(fmt.Errorf("internal error in %s", name), 500)
		}
	}()
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = json.RawMessage("{}")
	}
	content, err := t.run(ctx, s, args)
	if err != nil {
		return failed(err, statusOf(err))
	}
	return Result{Success: true, Content: content, Status: 200}
}

func failed(err error, status int) Result {
	return Result{Success: false, Content: []Content{{Type: "text", Text: describe(err)}}, Status: status, Code: codeOf(err)}
}

// decode reads a tool's arguments strictly, with errors the model can act on.
func decode(args json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &ToolError{Code: shared.CodeBadRequest, Msg: "invalid arguments: " + strings.TrimPrefix(err.Error(), "json: ")}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &ToolError{Code: shared.CodeBadRequest, Msg: "invalid arguments: trailing data after the object"}
	}
	return nil
}

func text(s string) Content { return Content{Type: "text", Text: s} }

func jsonText(v any) Content {
	b, _ := json.Marshal(v)
	return text(string(b))
}

// observation renders a botd observation for the model: the image (unless
// unchanged) and its metadata.
func observation(o client.Observation) []Content {
	meta := map[string]any{"width": o.Width, "height": o.Height, "pointer": o.Pointer, "unchanged": o.Unchanged}
	if len(o.Blocked) > 0 && string(o.Blocked) != "null" && string(o.Blocked) != "[]" {
		meta["blocked"] = o.Blocked
	}
	if len(o.Elements) > 0 {
		meta["elements"] = o.Elements
	}
	if o.ElementsError != nil {
		meta["elementsError"] = o.ElementsError
	}
	out := []Content{jsonText(meta)}
	if !o.Unchanged && o.Image != "" {
		out = append(out, Content{Type: "image", ImageURL: "data:image/jpeg;base64," + o.Image})
	} else if o.Unchanged {
		out[0].Text += "\n(the screen has not changed since your last screenshot)"
	}
	return out
}

// screenArg is the optional screen every graphical tool takes.
type screenArg struct {
	Screen string `json:"screen"`
}

func (a *screenArg) screenID() string { return a.Screen }

type screened interface{ screenID() string }

// leased is the shape of every graphical tool: decode the arguments into a,
// check them (before anything starts a screen), resolve the screen under
// the namespace rule, and run fn under the session's lease on it.
func leased(ctx context.Context, s *Session, raw json.RawMessage, a screened, check func() error, fn func(screen, leaseID string) error) error {
	if err := decode(raw, a); err != nil {
		return err
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	screen, err := s.screen(a.screenID())
	if err != nil {
		return err
	}
	if s.CheckScreen != nil {
		if err := s.CheckScreen(ctx, screen); err != nil {
			return err
		}
	}
	return s.withLease(ctx, screen, func(l string) error { return fn(screen, l) })
}

func observe(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a struct {
		screenArg
		Elements bool `json:"elements"`
	}
	var o client.Observation
	em := machines.ElementsOf(s.Machine)
	hasElements := em != nil
	check := func() error {
		if a.Elements && !hasElements {
			return &ToolError{Code: shared.CodeElementsUnavailable, Msg: "this computer does not list elements; observe without elements and act by x and y"}
		}
		return nil
	}
	err := leased(ctx, s, raw, &a, check, func(screen, l string) (err error) {
		if a.Elements {
			o, err = em.ObserveElements(ctx, screen, l)
		} else {
			o, err = s.Machine.Observe(ctx, screen, l)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return observation(o), nil
}

func windows(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a screenArg
	var ws []shared.Window
	err := leased(ctx, s, raw, &a, nil, func(screen, l string) (err error) {
		ws, err = s.Machine.Windows(ctx, screen, l)
		return err
	})
	if err != nil {
		return nil, err
	}
	if ws == nil {
		ws = []shared.Window{}
	}
	return []Content{jsonText(shared.Windows{Windows: ws})}, nil
}

func clipboardRead(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a screenArg
	var t string
	err := leased(ctx, s, raw, &a, nil, func(screen, l string) (err error) {
		t, err = s.Machine.Clipboard(ctx, screen, l)
		return err
	})
	if err != nil {
		return nil, err
	}
	return []Content{jsonText(shared.Clipboard{Text: t})}, nil
}

func clipboardWrite(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a struct {
		screenArg
		Text *string `json:"text"`
	}
	check := func() error {
		switch {
		case a.Text == nil:
			return &ToolError{Code: shared.CodeBadRequest, Msg: "text is required"}
		case len(*a.Text) > shared.MaxClipboardBytes:
			return &ToolError{Code: shared.CodeTooLarge, Msg: fmt.Sprintf("%d bytes; the clipboard takes at most %d", len(*a.Text), shared.MaxClipboardBytes)}
		}
		return nil
	}
	err := leased(ctx, s, raw, &a, check, func(screen, l string) error {
		return s.Machine.SetClipboard(ctx, screen, l, *a.Text)
	})
	if err != nil {
		return nil, err
	}
	return []Content{text(fmt.Sprintf("the clipboard now holds %d bytes", len(*a.Text)))}, nil
}

func act(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a struct {
		screenArg
		Actions  []shared.Action `json:"actions"`
		Elements bool            `json:"elements"`
	}
	em := machines.ElementsOf(s.Machine)
	hasElements := em != nil
	check := func() error {
		validate := shared.ValidateActions
		if hasElements {
			validate = shared.ValidateActionsElements
		}
		if err := validate(a.Actions, 1280, 800); err != nil {
			return &ToolError{Code: shared.CodeInvalidAction, Msg: err.Error()}
		}
		if a.Elements && !hasElements {
			return &ToolError{Code: shared.CodeElementsUnavailable, Msg: "this computer does not list elements; act by x and y"}
		}
		return nil
	}
	var r client.ActResult
	err := leased(ctx, s, raw, &a, check, func(screen, l string) (err error) {
		if hasElements && (a.Elements || usesElements(a.Actions)) {
			r, err = em.ActElements(ctx, screen, l, a.Actions)
		} else {
			r, err = s.Machine.Act(ctx, screen, l, a.Actions)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out := observation(r.Observation)
	if len(r.Results) > 0 {
		out = append([]Content{text("results: " + string(r.Results))}, out...)
	}
	return out, nil
}

// usesElements reports whether any action targets an element.
func usesElements(actions []shared.Action) bool {
	for _, a := range actions {
		if a.Element != "" {
			return true
		}
	}
	return false
}

func openPath(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a struct {
		screenArg
		Target string `json:"target"`
	}
	check := func() error {
		if strings.TrimSpace(a.Target) == "" {
			return &ToolError{Code: shared.CodeBadRequest, Msg: "target is required"}
		}
		return nil
	}
	var r json.RawMessage
	err := leased(ctx, s, raw, &a, check, func(screen, l string) (err error) {
		r, err = s.Machine.Open(ctx, screen, l, a.Target)
		return err
	})
	if err != nil {
		return nil, err
	}
	return []Content{text("opened: " + string(r))}, nil
}

func launchApp(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a struct {
		screenArg
		App string `json:"app"`
	}
	var r json.RawMessage
	err := leased(ctx, s, raw, &a, nil, func(screen, l string) (err error) {
		r, err = s.Machine.Launch(ctx, screen, l, a.App)
		return err
	})
	if err != nil {
		return nil, err
	}
	return []Content{text("launched: " + string(r))}, nil
}

func readPage(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a screenArg
	// Reading needs the screen running but no input: the lease keeps a
	// person's screen out of reach all the same.
	var p client.Page
	err := leased(ctx, s, raw, &a, nil, func(screen, _ string) (err error) {
		p, err = s.Machine.ReadPage(ctx, screen)
		return err
	})
	if err != nil {
		return nil, err
	}
	return []Content{jsonText(p)}, nil
}

// typeSecret has botd type a vault secret into the focused field, only on
// the secret's origin (botd checks, in the page, in the same step as the
// typing). The value appears in no result or error: botd never echoes it,
// and any text that would carry it is replaced.
func typeSecret(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a struct {
		screenArg
		Name string `json:"name"`
	}
	var origin, value string
	var visible bool
	check := func() error {
		if strings.TrimSpace(a.Name) == "" {
			return &ToolError{Code: shared.CodeBadRequest, Msg: "name is required"}
		}
		if s.Secret == nil {
			return &ToolError{Code: shared.CodeConflict, Msg: "this session has no vault"}
		}
		var err error
		origin, value, visible, err = s.Secret(ctx, a.Name)
		var ae *shared.APIError
		if errors.As(err, &ae) && ae.Code == shared.CodeNotFound {
			names := []string{}
			if s.SecretNames != nil {
				names = s.SecretNames(ctx)
			}
			return &ToolError{Code: shared.CodeNotFound, Msg: fmt.Sprintf("no secret named %q in this computer's vault (it holds: %s)", a.Name, strings.Join(names, ", "))}
		}
		if err != nil {
			return &ToolError{Code: shared.CodeUnavailable, Msg: "the vault could not be read; try again"}
		}
		return nil
	}
	err := leased(ctx, s, raw, &a, check, func(screen, l string) error {
		return s.Machine.TypeSecret(ctx, screen, l, origin, value, visible)
	})
	if err != nil {
		if value != "" && strings.Contains(describe(err), value) {
			return nil, &ToolError{Code: shared.CodeInternal, Msg: "typing the secret failed"}
		}
		return nil, err
	}
	return []Content{text(fmt.Sprintf("typed the secret %q into the focused field on %s", a.Name, origin))}, nil
}

func shell(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a struct {
		Argv      []string `json:"argv"`
		Cwd       string   `json:"cwd"`
		TimeoutMs int      `json:"timeoutMs"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if len(a.Argv) == 0 {
		return nil, &ToolError{Code: shared.CodeBadRequest, Msg: "argv needs at least one element"}
	}
	r, err := s.Machine.Exec(ctx, client.ExecRequest{Argv: a.Argv, Cwd: a.Cwd, TimeoutMs: a.TimeoutMs})
	if err != nil {
		return nil, err
	}
	return []Content{jsonText(r)}, nil
}

func fileRead(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a struct {
		Path string `json:"path"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	b, err := s.Machine.ReadFile(ctx, a.Path, MaxFileRead+1)
	if err != nil {
		return nil, err
	}
	note := ""
	if len(b) > MaxFileRead {
		b, note = b[:MaxFileRead], fmt.Sprintf("\n[truncated at %d bytes]", MaxFileRead)
	}
	if !utf8.Valid(b) {
		return []Content{text(fmt.Sprintf("%s is binary (%d bytes shown as nothing); use shell to inspect it", a.Path, len(b)))}, nil
	}
	return []Content{text(string(b) + note)}, nil
}

func fileWrite(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if a.Content == nil {
		return nil, &ToolError{Code: shared.CodeBadRequest, Msg: "content is required"}
	}
	if err := s.Machine.WriteFile(ctx, a.Path, []byte(*a.Content)); err != nil {
		return nil, err
	}
	return []Content{text(fmt.Sprintf("wrote %d bytes to %s", len(*a.Content), a.Path))}, nil
}

func fileList(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a struct {
		Path string `json:"path"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	r, err := s.Machine.ListFiles(ctx, a.Path)
	if err != nil {
		return nil, err
	}
	return []Content{text(string(r))}, nil
}

func requestTakeover(ctx context.Context, s *Session, raw json.RawMessage) ([]Content, error) {
	var a struct {
		screenArg
		Reason string `json:"reason"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	screen, err := s.screen(a.Screen)
	if err != nil {
		return nil, err
	}
	if s.Takeover == nil {
		return nil, &ToolError{Code: shared.CodeConflict, Msg: "takeover is only available inside a run"}
	}
	if s.CheckScreen != nil {
		// A single-screen backend hands a person only its primary screen.
		if err := s.CheckScreen(ctx, screen); err != nil {
			return nil, err
		}
	}
	// Hand the screen over: release our lease so the person's lease is not
	// a preemption, and wait for them.
	s.mu.Lock()
	id := s.leases[screen]
	delete(s.leases, screen)
	s.mu.Unlock()
	if id != "" {
		_ = s.Machine.ReleaseLease(ctx, screen, id)
	}
	if err := s.Takeover(ctx, screen, a.Reason); err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, &ToolError{Code: shared.CodeConflict, Msg: err.Error()}
	}
	return []Content{text("the person handed the screen back; take a screenshot to see what changed")}, nil
}
