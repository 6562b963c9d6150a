package main

// The people's CLI: `worker computers …` and `worker runs …` talk to a
// running worker (WORKER_URL, token from WORKER_TOKEN(_FILE) or
// DATA_DIR/worker-token), print something readable, or JSON with --json.
// Operator actions (adopt, attach, `worker dashboard`) use the operator's
// credential instead: WORKER_OPERATOR_TOKEN(_FILE) over WORKER_URL when
// set, else the worker's operator socket (DATA_DIR/operator.sock).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/httpapi"
	"github.com/open-bot/computer/apps/worker/internal/mcp"
	"github.com/open-bot/computer/apps/worker/internal/progress"
)

// cliClient is a client of the worker's API.
type cliClient struct {
	url, token, capa string
	// restoreKey is a create's X-Restore-Key (a scope's kept home).
	restoreKey string
	asJSON     bool
	out        io.Writer
	// socket is the operator socket's path; hc, when set, dials it.
	socket string
	hc     *http.Client
	// prog shows long work (on stderr): a redrawn line on a terminal,
	// plain lines elsewhere.
	prog *progress.Printer
	// began is when the last longCall began.
	began time.Time
}

func commonFlags(fs *flag.FlagSet, c *cliClient) {
	fs.StringVar(&c.url, "url", envOr("WORKER_URL", "http://127.0.0.1:7100"), "worker URL (WORKER_URL)")
	fs.StringVar(&c.socket, "operator-socket", httpapi.OperatorSocket(envOr("DATA_DIR", defaultDataDir())), "operator actions without WORKER_OPERATOR_TOKEN(_FILE): the worker's operator socket (DATA_DIR/operator.sock)")
	fs.StringVar(&c.capa, "capability", os.Getenv("WORKER_CAPABILITY"), "the computer's capability (WORKER_CAPABILITY)")
	fs.BoolVar(&c.asJSON, "json", false, "print JSON")
}

func (c *cliClient) loadToken() error {
	tok, _, err := secretEnv("WORKER_TOKEN")
	if err != nil {
		return err
	}
	if tok == "" {
		b, err := os.ReadFile(envOr("DATA_DIR", defaultDataDir()) + "/worker-token")
		if err != nil {
			return errors.New("no worker token: set WORKER_TOKEN or WORKER_TOKEN_FILE (worker serve prints where it is)")
		}
		tok = strings.TrimSpace(string(b))
	}
	c.token = tok
	return nil
}

// useOperator makes c act as the operator: WORKER_OPERATOR_TOKEN(_FILE)
// over WORKER_URL when set, else the operator socket (root or the worker's
// user, on the worker's host). The callers' token is never sent for these.
func (c *cliClient) useOperator() error {
	tok, _, err := secretEnv("WORKER_OPERATOR_TOKEN")
	if err != nil {
		return err
	}
	if tok != "" {
		c.token = tok
		return nil
	}
	if _, err := os.Stat(c.socket); err != nil {
		return fmt.Errorf("this is an operator action: run it on the worker's host as root or the worker's user (operator socket %s: %v; set DATA_DIR as the worker has it), or set WORKER_OPERATOR_TOKEN(_FILE)", c.socket, err)
	}
	sock := c.socket
	c.token = ""
	c.hc = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	return nil
}

func (c *cliClient) request(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.url, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.capa != "" {
		req.Header.Set("X-Computer-Capability", c.capa)
	}
	if c.restoreKey != "" {
		req.Header.Set("X-Restore-Key", c.restoreKey)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc, where := http.DefaultClient, c.url
	if c.hc != nil {
		hc, where = c.hc, "operator socket "+c.socket
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("worker at %s: %w", where, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var env struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
			return nil, fmt.Errorf("%s (%d %s)", env.Error.Message, resp.StatusCode, env.Error.Code)
		}
		return nil, fmt.Errorf("worker answered %s", resp.Status)
	}
	return resp, nil
}

// call sends a request and decodes the JSON answer into out (as a map when
// out is nil) and prints it with --json.
func (c *cliClient) call(ctx context.Context, method, path string, body any, out any) error {
	resp, err := c.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if c.asJSON {
		_, _ = c.out.Write(raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

type cliComputer struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	Provider  string `json:"provider"`
	State     string `json:"state"`
	LastError string `json:"lastError"`
	Scope     struct {
		Session, Team string
		Account       bool
	} `json:"scope"`
}

func (c cliComputer) scope() string {
	switch {
	case c.Scope.Account:
		return "account"
	case c.Scope.Team != "":
		return "team:" + c.Scope.Team
	}
	return "session:" + c.Scope.Session
}

const computersUsage = `usage: worker computers <create|list|adopt|restore-key|add-bot|remove-bot|stop|start|recover|checkpoint|destroy> [flags]
  create  [--team T | --session S | --account] [--kind team|private] [--provider KIND] [--template open-bot|desktop]
          [--restore-key-file FILE] [--attach-url URL --attach-token-file FILE]   prints the capability once
          (--restore-key-file: the scope's kept home, restored into the new computer; without it the computer starts empty)
          (attach is an operator action: this CLI reads FILE and sends the token by value)
  list    [--team T | --session S | --account]   (with one: that scope's live computer)
  adopt ID   operator: a new capability (the old one stops working; a restart forgets them all)
  restore-key SCOPE   operator: a new restore key for the newest kept home of SCOPE (team:T, session:S or account),
          when a restart forgot the one destroy --keep-home printed (an older key of that home stops working)
  add-bot  --capability C ID BOT   bot ids: ^[a-z0-9][a-z0-9_]{0,62}$ (no '-')
  remove-bot --capability C [--purge] ID BOT   stop its screens, forget their profiles (--purge: and bots/BOT/)
  stop|start|recover|destroy --capability C ID
  destroy --keep-home --capability C ID   keep the home in the home store; prints its restore key once (single-use;
          a restart forgets it, restore-key mints a new one)
  checkpoint --capability C ID   export the computer's home into the home store now
long work (create, start, recover, checkpoint) shows its phase and time on stderr
(one redrawn line on a terminal, plain lines elsewhere; none with --json)
common flags: --url (WORKER_URL) --json; the token: WORKER_TOKEN(_FILE) or DATA_DIR/worker-token;
operator actions: WORKER_OPERATOR_TOKEN(_FILE), else --operator-socket (DATA_DIR/operator.sock)
`

func runComputers(ctx context.Context, args []string) error {
	return runComputersWith(ctx, args, progress.For(os.Stderr))
}

// runComputersWith is runComputers showing long work on prog.
func runComputersWith(ctx context.Context, args []string, prog *progress.Printer) error {
	if len(args) == 0 {
		return errors.New(computersUsage)
	}
	c := &cliClient{out: os.Stdout, prog: prog}
	fs := flag.NewFlagSet("computers "+args[0], flag.ContinueOnError)
	commonFlags(fs, c)
	team := fs.String("team", "", "team scope (share: true)")
	session := fs.String("session", "", "session scope (the default: a new session)")
	account := fs.Bool("account", false, "account scope: one computer for the whole deployment")
	kind := fs.String("kind", "", "team or private")
	purge := fs.Bool("purge", false, "remove-bot: also remove bots/<bot>/")
	provider := fs.String("provider", "", "provider kind (default: the worker's WORKER_PROVIDER)")
	template := fs.String("template", "", "create: the provider's template (e2b: open-bot or desktop; default: the worker's E2B_TEMPLATE)")
	attURL := fs.String("attach-url", "", "attach: the botd URL")
	attTok := fs.String("attach-token-file", "", "attach: a file holding the botd's token (read here, sent by value; never pass the token as an argument)")
	restoreFile := fs.String("restore-key-file", "", "create: a file holding the scope's restore key (read here, sent in X-Restore-Key; never pass the key as an argument)")
	keepHome := fs.Bool("keep-home", false, "destroy: keep the computer's home in the home store and print its restore key")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if c.asJSON { // JSON alone, for programs (which often read stderr too)
		c.prog = progress.New(io.Discard, false)
	}
	operator := args[0] == "adopt" || args[0] == "restore-key" || (args[0] == "create" && (*attURL != "" || *attTok != "" || *provider == "attach"))
	if operator {
		if err := c.useOperator(); err != nil {
			return err
		}
	} else if err := c.loadToken(); err != nil {
		return err
	}
	pos := fs.Args()
	needID := func(n int) error {
		if len(pos) != n {
			return errors.New(computersUsage)
		}
		return nil
	}
	switch args[0] {
	case "create":
		body := map[string]any{"scope": map[string]any{}}
		sc := body["scope"].(map[string]any)
		if *team != "" {
			sc["team"] = *team
		}
		if *session != "" {
			sc["session"] = *session
		}
		if *account {
			sc["account"] = true
		}
		if *kind != "" {
			body["kind"] = *kind
		}
		if *provider != "" {
			body["provider"] = *provider
		}
		if *template != "" {
			body["template"] = *template
		}
		if *attURL != "" || *attTok != "" {
			tok := ""
			if *attTok != "" {
				b, err := os.ReadFile(*attTok)
				if err != nil {
					return fmt.Errorf("--attach-token-file: %w", err)
				}
				tok = strings.TrimSpace(string(b))
			}
			body["attach"] = map[string]string{"url": *attURL, "token": tok}
		}
		if *restoreFile != "" {
			b, err := os.ReadFile(*restoreFile)
			if err != nil {
				return fmt.Errorf("--restore-key-file: %w", err)
			}
			c.restoreKey = strings.TrimSpace(string(b))
		}
		var out struct {
			Computer   cliComputer `json:"computer"`
			Capability string      `json:"capability"`
			Restored   bool        `json:"restored"`
		}
		what := "creating a computer"
		if *provider != "" {
			what += " (" + *provider + ")"
		}
		if err := c.longCall(ctx, "POST", "/v1/computers", body, &out, what); err != nil {
			return err
		}
		c.restoreKey = "" // used once, by the create
		if out.Computer.ID != "" && out.Capability != "" {
			c.capa = out.Capability
			// The capability is printed below whatever the wait gives.
			if err := c.waitRunning(ctx, &out.Computer); err != nil {
				c.prog.Done("%v", err)
			}
		}
		if !c.asJSON {
			fmt.Printf("computer %s (%s, %s, %s) is %s\n", out.Computer.ID, out.Computer.Kind, out.Computer.Provider, out.Computer.scope(), out.Computer.State)
			if out.Computer.LastError != "" {
				fmt.Printf("  last error: %s\n", out.Computer.LastError)
			}
			if out.Restored {
				fmt.Println("  the scope's kept home was restored into it (the restore key is used up)")
			}
			fmt.Printf("capability (shown once; a worker restart forgets it, adopt mints a new one):\n%s\n", out.Capability)
		}
		return nil
	case "list":
		var out struct {
			Computers []cliComputer `json:"computers"`
		}
		path := "/v1/computers"
		switch { // the scope's live computer only
		case *team != "":
			path += "?scope=" + url.QueryEscape("team:"+*team)
		case *session != "":
			path += "?scope=" + url.QueryEscape("session:"+*session)
		case *account:
			path += "?scope=account"
		}
		if err := c.call(ctx, "GET", path, nil, &out); err != nil {
			return err
		}
		if !c.asJSON {
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKIND\tPROVIDER\tSCOPE\tSTATE")
			for _, x := range out.Computers {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", x.ID, x.Kind, x.Provider, x.scope(), x.State)
			}
			tw.Flush()
		}
		return nil
	case "add-bot":
		if err := needID(2); err != nil {
			return err
		}
		var out struct {
			Bot struct{ ID, Dir, Screen string } `json:"bot"`
		}
		if err := c.call(ctx, "POST", "/v1/computers/"+pos[0]+"/bots", map[string]string{"id": pos[1]}, &out); err != nil {
			return err
		}
		if !c.asJSON {
			fmt.Printf("bot %s added: works in %s, screen %s\n", out.Bot.ID, out.Bot.Dir, out.Bot.Screen)
		}
		return nil
	case "remove-bot":
		if err := needID(2); err != nil {
			return err
		}
		path := "/v1/computers/" + pos[0] + "/bots/" + url.PathEscape(pos[1])
		if *purge {
			path += "?purge=true"
		}
		var out struct {
			Screens []string `json:"forgottenScreens"`
		}
		if err := c.call(ctx, "DELETE", path, nil, &out); err != nil {
			return err
		}
		if !c.asJSON {
			fmt.Printf("bot %s removed; screens forgotten: %s\n", pos[1], strings.Join(out.Screens, ", "))
		}
		return nil
	case "adopt":
		if err := needID(1); err != nil {
			return err
		}
		var out struct {
			Capability string `json:"capability"`
		}
		if err := c.call(ctx, "POST", "/v1/computers/"+pos[0]+"/adopt", nil, &out); err != nil {
			return err
		}
		if !c.asJSON {
			fmt.Printf("new capability for %s (the old one no longer works):\n%s\n", pos[0], out.Capability)
		}
		return nil
	case "restore-key":
		if err := needID(1); err != nil {
			return err
		}
		var out struct {
			RestoreKey string `json:"restoreKey"`
			ComputerID string `json:"computerId"`
		}
		if err := c.call(ctx, "POST", "/v1/scopes/"+url.PathEscape(pos[0])+"/restore-key", nil, &out); err != nil {
			return err
		}
		if !c.asJSON {
			fmt.Printf("restore key for %s (the kept home of %s; works once, an older key stops working, a restart forgets it):\n%s\n", pos[0], out.ComputerID, out.RestoreKey)
		}
		return nil
	case "checkpoint":
		if err := needID(1); err != nil {
			return err
		}
		var out struct {
			Revision int64     `json:"revision"`
			Size     int64     `json:"size"`
			At       time.Time `json:"at"`
		}
		// The worker's answer comes when the export is stored, with no byte
		// counts before: phase and elapsed while it runs, then the size and
		// the rate from the answer.
		if err := c.longCall(ctx, "POST", "/v1/computers/"+pos[0]+"/checkpoint", nil, &out, "checkpointing "+pos[0]); err != nil {
			return err
		}
		el := c.prog.Elapsed()
		c.prog.Done("checkpointed %s: %s in %s (%s)", pos[0], progress.Size(out.Size), progress.Duration(el), progress.Rate(out.Size, el))
		if !c.asJSON {
			fmt.Printf("checkpoint %d of %s: %d bytes at %s\n", out.Revision, pos[0], out.Size, out.At.Format(time.RFC3339))
		}
		return nil
	case "stop", "start", "recover", "destroy":
		if err := needID(1); err != nil {
			return err
		}
		method, path := "POST", "/v1/computers/"+pos[0]+"/"+args[0]
		if args[0] == "destroy" {
			method, path = "DELETE", "/v1/computers/"+pos[0]
			if *keepHome {
				path += "?keepHome=true"
			}
		}
		var out struct {
			Computer   cliComputer `json:"computer"`
			RestoreKey string      `json:"restoreKey"`
		}
		verb := map[string]string{"stop": "stopping", "start": "starting", "recover": "recovering", "destroy": "destroying"}[args[0]]
		if err := c.longCall(ctx, method, path, nil, &out, verb+" "+pos[0]); err != nil {
			return err
		}
		if args[0] == "start" || args[0] == "recover" {
			// A machine that is gone is replaced and the latest checkpoint
			// restored into it, inside this call (no byte counts in the answer).
			if err := c.waitRunning(ctx, &out.Computer); err != nil {
				return err
			}
		} else {
			c.prog.Done("%s is %s after %s", pos[0], out.Computer.State, progress.Duration(time.Since(c.began)))
		}
		if !c.asJSON {
			fmt.Printf("computer %s is %s\n", out.Computer.ID, out.Computer.State)
			if out.Computer.LastError != "" {
				fmt.Printf("  last error: %s\n", out.Computer.LastError)
			}
			if out.RestoreKey != "" {
				fmt.Printf("restore key of its kept home (shown once; create --restore-key-file restores it, once; a worker restart forgets it, restore-key mints a new one):\n%s\n", out.RestoreKey)
			}
		}
		return nil
	}
	return errors.New(computersUsage)
}

// longCall is call showing phase and elapsed time while the worker works.
func (c *cliClient) longCall(ctx context.Context, method, path string, body, out any, phase string) error {
	c.began = time.Now()
	c.prog.Phase(phase)
	stop := c.prog.Every(250 * time.Millisecond)
	err := c.call(ctx, method, path, body, out)
	stop()
	if err != nil {
		c.prog.Done("%s failed after %s", phase, progress.Duration(c.prog.Elapsed()))
	}
	return err
}

// waitRunning waits for the computer to be running (asking the worker
// every second while it is creating or starting), showing its state, and
// says how it ended; comp is its last view.
func (c *cliClient) waitRunning(ctx context.Context, comp *cliComputer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	state := ""
	stop := c.prog.Every(250 * time.Millisecond)
	defer stop()
	for comp.State == "creating" || comp.State == "starting" {
		if comp.State != state {
			state = comp.State
			c.prog.Phase("waiting for " + comp.ID + " to be running (" + state + ")")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is still %s: %w", comp.ID, comp.State, ctx.Err())
		case <-time.After(time.Second):
		}
		var out struct {
			Computer cliComputer `json:"computer"`
		}
		asJSON := c.asJSON
		c.asJSON = false // the command's answer was printed already
		err := c.call(ctx, "GET", "/v1/computers/"+comp.ID, nil, &out)
		c.asJSON = asJSON
		if err != nil {
			return err
		}
		*comp = out.Computer
	}
	stop()
	c.prog.Done("%s is %s after %s", comp.ID, comp.State, progress.Duration(time.Since(c.began)))
	return nil
}

const runsUsage = `usage: worker runs <start|watch|stop> --computer ID --capability C [flags]
  start --bot B --prompt TEXT [--model M] [--watch]
  watch RUN      follow the run's events to its end
  stop RUN
`

func runRuns(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New(runsUsage)
	}
	c := &cliClient{out: os.Stdout}
	fs := flag.NewFlagSet("runs "+args[0], flag.ContinueOnError)
	commonFlags(fs, c)
	comp := fs.String("computer", os.Getenv("WORKER_COMPUTER"), "computer id (WORKER_COMPUTER)")
	bot := fs.String("bot", "", "bot id")
	prompt := fs.String("prompt", "", "what the bot should do")
	model := fs.String("model", "", "model (default: the worker's)")
	runtime := fs.String("runtime", "", "where the agent loop runs: worker or machine (default: the computer's)")
	watch := fs.Bool("watch", false, "start: then follow the run")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := c.loadToken(); err != nil {
		return err
	}
	if *comp == "" {
		return errors.New("--computer is required\n" + runsUsage)
	}
	base := "/v1/computers/" + *comp + "/runs"
	type run struct {
		ID, BotID, Runtime, Status, Error, Message string
	}
	var out struct {
		Run run `json:"run"`
	}
	switch args[0] {
	case "start":
		if err := c.call(ctx, "POST", base, map[string]string{"botId": *bot, "prompt": *prompt, "model": *model, "runtime": *runtime}, &out); err != nil {
			return err
		}
		if !c.asJSON {
			fmt.Printf("run %s started for bot %s (%s; runtime %s)\n", out.Run.ID, out.Run.BotID, out.Run.Status, out.Run.Runtime)
		}
		if *watch {
			return c.watch(ctx, base+"/"+out.Run.ID+"/events")
		}
		if !c.asJSON {
			fmt.Printf("follow it: worker runs watch --computer %s %s\n", *comp, out.Run.ID)
		}
		return nil
	case "watch":
		if fs.NArg() != 1 {
			return errors.New(runsUsage)
		}
		return c.watch(ctx, base+"/"+fs.Arg(0)+"/events")
	case "stop":
		if fs.NArg() != 1 {
			return errors.New(runsUsage)
		}
		if err := c.call(ctx, "POST", base+"/"+fs.Arg(0)+"/stop", nil, &out); err != nil {
			return err
		}
		if !c.asJSON {
			fmt.Printf("run %s is %s\n", out.Run.ID, out.Run.Status)
		}
		return nil
	}
	return errors.New(runsUsage)
}

// watch follows a run's SSE stream: each event one line (or its JSON).
func (c *cliClient) watch(ctx context.Context, path string) error {
	resp, err := c.request(ctx, "GET", path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if c.asJSON {
			fmt.Fprintf(c.out, "{\"event\":%q,\"data\":%s}\n", event, data)
			if event == "end" {
				return nil
			}
			continue
		}
		var e struct {
			At   time.Time       `json:"at"`
			Data json.RawMessage `json:"data"`
			// end carries the run itself
			Status, Error, Message string
		}
		_ = json.Unmarshal([]byte(data), &e)
		switch event {
		case "end":
			fmt.Fprintf(c.out, "run ended: %s", e.Status)
			if e.Error != "" {
				fmt.Fprintf(c.out, " (%s)", e.Error)
			}
			fmt.Fprintln(c.out)
			if e.Message != "" {
				fmt.Fprintf(c.out, "bot says: %s\n", e.Message)
			}
			return nil
		case "notification":
			continue // Codex's own chatter; --json shows it
		default:
			d := string(e.Data)
			if len(d) > 200 {
				d = d[:200] + "…"
			}
			fmt.Fprintf(c.out, "%s %-12s %s\n", e.At.Local().Format("15:04:05"), event, d)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the event stream ended before the run did")
}

// runMCP is `worker mcp --stdio`: a local MCP client (Claude Desktop, an
// IDE, an agent) on stdin/stdout, bridged to the worker's /mcp as one bot
// on one computer. The capability may come from a file
// (WORKER_CAPABILITY_FILE), like the token, so a client's config names files
// rather than holding secrets.
func runMCP(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	var c cliClient
	commonFlags(fs, &c)
	stdio := fs.Bool("stdio", false, "bridge stdin/stdout to the worker's /mcp (the only mode)")
	bot := fs.String("bot", os.Getenv("WORKER_BOT"), "the bot the session acts as (WORKER_BOT)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*stdio {
		return errors.New("usage: worker mcp --stdio [--url URL] [--capability CAP] [--bot BOT]")
	}
	if c.capa == "" {
		capa, _, err := secretEnv("WORKER_CAPABILITY")
		if err != nil {
			return err
		}
		c.capa = capa
	}
	if c.capa == "" || *bot == "" {
		return errors.New("worker mcp: the computer's capability (--capability, WORKER_CAPABILITY or WORKER_CAPABILITY_FILE) and the bot (--bot or WORKER_BOT) are required")
	}
	if err := c.loadToken(); err != nil {
		return err
	}
	return mcp.Bridge(ctx, os.Stdin, os.Stdout, mcp.BridgeOptions{Endpoint: strings.TrimRight(c.url, "/") + mcp.Path,
		Token: c.token, Capability: c.capa, Bot: *bot})
}
