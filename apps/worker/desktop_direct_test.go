package main

// No agent runs on a vendor's stock desktop (E2B's desktop template,
// Daytona's desktop snapshot, a Box): the model key would be the sandbox
// user's to read (issue 36, row 4; TestRedTeamDesktopModelKey). The
// acceptance flows there play the scripted model's decisions through the
// worker's direct tool API instead of a run, so what they check of the
// machine (the screen the model looks at, the click that presses the
// button, the shell and file tools, the checkpoint and the replacement)
// is still checked, and a run there is checked to be refused.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/apps/worker/internal/runs"
)

// playDirect plays script for bot through POST /tools/{name} on d, each
// step's output carried back to the script as a model's conversation
// would carry it, until the script answers a message (at most maxSteps
// calls). It returns the calls as a run's snapshot lists them, and the
// final message.
func playDirect(t *testing.T, d *workerEnv, bot string, script mockmodel.Script, maxSteps int) ([]runs.ToolCall, string) {
	t.Helper()
	var outs []mockmodel.Output
	var calls []runs.ToolCall
	for range maxSteps {
		step := script(outs)
		if step.Tool == "" {
			return calls, step.Message
		}
		args, err := json.Marshal(step.Args)
		require.NoError(t, err)
		var res struct {
			Success bool `json:"success"`
			Content []struct {
				Type     string `json:"type"`
				Text     string `json:"text"`
				ImageURL string `json:"imageUrl"`
			} `json:"content"`
		}
		start := time.Now()
		status := d.do(t, "POST", "/tools/"+step.Tool, map[string]any{"botId": bot, "args": json.RawMessage(args)}, &res)
		id := fmt.Sprintf("call_%d", len(calls))
		o := mockmodel.Output{CallID: id}
		tc := runs.ToolCall{CallID: id, Tool: step.Tool, Arguments: args, Success: res.Success && status == http.StatusOK, Ms: time.Since(start).Milliseconds()}
		for _, c := range res.Content {
			switch c.Type {
			case "text":
				o.Text += c.Text
				tc.Output += c.Text
			case "image":
				o.Images = append(o.Images, c.ImageURL)
				tc.Images++
			}
		}
		outs = append(outs, o)
		calls = append(calls, tc)
	}
	t.Fatalf("the script made more than %d tool calls: %+v", maxSteps, calls)
	return nil, ""
}

// requireNoRun checks that a run of bot on d is refused: 501 unavailable,
// saying why (the model key never enters the machine).
func requireNoRun(t *testing.T, d *workerEnv, bot, prompt string) {
	t.Helper()
	var got struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	status := d.do(t, "POST", "/runs", map[string]string{"botId": bot, "prompt": prompt}, &got)
	require.Equal(t, http.StatusNotImplemented, status, "a run on a stock desktop: %+v", got)
	require.NotNil(t, got.Error)
	require.Equal(t, "unavailable", got.Error.Code)
	require.Contains(t, got.Error.Message, "model key never enters")
}

// acceptanceDirect is seed 000's acceptance flow on a desktop machine with
// the scripted model's decisions played through the direct tool API
// (playDirect) against the button page (mockserve in the sandbox): the
// model saw the page in every screenshot, clicked the button once and
// never off it, and ran the shell and file tools.
func acceptanceDirect(t *testing.T, d *workerEnv, page *inContainer, pageURL, bot string) {
	t.Helper()
	requireNoRun(t, d, bot, acceptancePrompt(pageURL, bot))
	flow := mockmodel.NewAcceptance(pageURL, bot)
	calls, msg := playDirect(t, d, bot, flow.Script, 40)
	require.Contains(t, msg, "Done", "the model's last word: %s; its view: %+v", msg, flow.Report())
	requireSawAndPressed(t, runs.Snapshot{ToolCalls: calls}, flow.Report(), page.Clicked(), page.Misses())
}

// takeoverNoRun is takeover on a desktop machine (computer c of bot, on
// worker e, in the container containerOf names), where no run can be
// busy or ask for a person: a run is refused; the policy still answers
// 409 "Stop the bot first" while another worker's run holds the bot's
// execution lease; an idle bot's takeover gives a worker control link
// (never naming any of hidden: the vendor's desktop URL or its secret), a
// raw RFB client through the worker's relay moves the X pointer on the
// sandbox's display while control is held, the agent's tools are refused
// meanwhile (user_has_control), and the release closes the connection
// from the server, the link is refused (410), later input never reaches
// X, and the agent has its screen back.
func takeoverNoRun(t *testing.T, e, c *workerEnv, bot string, containerOf func(ref string) string, hidden ...string) {
	t.Helper()
	ctx := t.Context()
	row, err := e.w.Store.GetComputer(ctx, c.computer)
	require.NoError(t, err)
	container := containerOf(row.ProviderRef)
	status, text := toolCall(t, c, bot, "computer_observe", map[string]any{})
	require.Equal(t, http.StatusOK, status, "the agent observes before any takeover: %s", text)
	m, err := e.w.Computers.Machine(ctx, c.computer)
	require.NoError(t, err)
	scs, err := m.Screens(ctx)
	require.NoError(t, err)
	display := ""
	for _, s := range scs {
		if s.ID == bot {
			display = s.Display
		}
	}
	require.NotEmpty(t, display, "the bot's screen: %+v", scs)

	requireNoRun(t, c, bot, "Sign in to the page; ask a person to do it.")

	// Busy: the execution lease held by another worker's run.
	l, err := e.w.Store.AcquireLease(ctx, computers.LeaseKey(row, bot), "r_of_another_worker", time.Minute)
	require.NoError(t, err)
	status, _, msg := takeoverCall(t, c, "POST", bot, "")
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, "Stop the bot first", msg)
	require.NoError(t, e.w.Store.ReleaseLease(ctx, l.Key, l.Epoch))
	status, _, _ = takeoverCall(t, c, "POST", bot, "not-the-capability-0123456789abcdef")
	require.Equal(t, http.StatusNotFound, status)

	// Idle: a person takes the screen.
	status, got, msg := takeoverCall(t, c, "POST", bot, "")
	require.Equal(t, http.StatusOK, status, msg)
	link := got.URL
	require.True(t, strings.HasPrefix(link, e.url), "a worker control link, got %+v", got)
	for _, h := range hidden {
		require.NotContains(t, link, h, "the vendor's desktop URL never reaches a browser")
	}
	rfb := connectControl(t, link)
	require.NoError(t, rfb.pointer(0, 123, 234))
	waitFor(t, "the pointer to move on the sandbox's X", 30*time.Second, func() bool {
		x, y := pointerIn(t, container, display, "")
		return x == 123 && y == 234
	})
	status, text = toolCall(t, c, bot, "computer_observe", map[string]any{})
	require.NotEqual(t, http.StatusOK, status, "the agent got the screen while a person holds it: %s", text)
	require.Contains(t, text, "user_has_control")

	// Release.
	status, _, _ = takeoverCall(t, c, "DELETE", bot, "")
	require.Equal(t, http.StatusOK, status)
	_ = rfb.pointer(0, 321, 123)
	requireClosedByServer(t, rfb, 20*time.Second, "the released control connection")
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, st, err := dialRFB(dctx, wsURL(link))
	cancel()
	require.Error(t, err)
	require.Equal(t, http.StatusGone, st)
	x, y := pointerIn(t, container, display, "")
	require.False(t, x == 321 && y == 123, "a pointer move after the release reached the sandbox's X")
	status, text = toolCall(t, c, bot, "computer_observe", map[string]any{})
	require.Equal(t, http.StatusOK, status, "the agent has its screen back: %s", text)
}
