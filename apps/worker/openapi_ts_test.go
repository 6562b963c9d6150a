package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/openapi/openapitest"
	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// Displays and ports of the generated TypeScript client's local computer:
// 2 slots, displays 1180-1187, ports 32400-32421 (no other test uses them).
const (
	tsDisplayBase = 1180
	tsPortBase    = 32400
	tsSlots       = "2"
)

// TestOpenAPITypeScriptClient: a TypeScript client generated from the
// document (openapi-typescript types, openapi-fetch calls; npm packages
// pinned by internal/openapi/tsclient/package-lock.json) type-checks with
// tsc and drives a real worker making a real local computer: create → add
// a bot → shell → observe. The committed types must be what the generator
// makes of the document now (stale types fail the test), and the client's
// every request and answer goes through openapitest.Checker (a reverse
// proxy in front of the worker) as well.
func TestOpenAPITypeScriptClient(t *testing.T) {
	requireIntegration(t, "node", "npm", "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	dir, err := filepath.Abs("internal/openapi/tsclient")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openapi-fetch")); err != nil {
		cmd := exec.Command("npm", "ci", "--no-fund", "--no-audit")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "npm ci: %s", out)
	}
	// The committed types are the generator's output for the document now.
	fresh := filepath.Join(t.TempDir(), "schema.d.ts")
	out, err := exec.Command(filepath.Join(dir, "generate.sh"), fresh).CombinedOutput()
	require.NoError(t, err, "generate.sh: %s", out)
	want, err := os.ReadFile(fresh)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(dir, "schema.d.ts"))
	require.NoError(t, err)
	if !bytes.Equal(want, got) {
		wl, gl := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
		i := 0
		for i < len(wl) && i < len(gl) && wl[i] == gl[i] {
			i++
		}
		at := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "(end of file)"
		}
		t.Fatalf("internal/openapi/tsclient/schema.d.ts is stale: run `go generate ./apps/worker/internal/openapi/` and commit it (line %d: generated %q, committed %q)", i+1, at(wl), at(gl))
	}
	// tsc type-checks the client against the types (and emits dist/client.js).
	tsc := exec.Command(filepath.Join(dir, "node_modules", ".bin", "tsc"), "-p", ".")
	tsc.Dir = dir
	out, err = tsc.CombinedOutput()
	require.NoError(t, err, "tsc: %s", out)

	// A worker whose default provider is local, behind a checking proxy.
	mdir := openDir(t, "openapi-ts-")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, mdir),
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(tsDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(tsPortBase), "WORKER_LOCAL_SLOTS": tsSlots,
		// No model is asked here: a closed loopback port.
		"MODEL_UPSTREAM_URL": "http://127.0.0.1:1/v1", "MODEL_API_KEY": scriptedKey,
	}
	token := "openapi-ts-token-0123456789"
	w, err := newWorker(t.Context(), serveConfig{DataDir: t.TempDir(), Provider: providers.KindLocal, Token: token,
		Model: "scripted-model", ModelProvider: "botd", Approvals: "decline", MachinesDir: filepath.Join(mdir, "machines"),
		Getenv: envMap(env)}, testLog(t))
	require.NoError(t, err)
	srv := httptest.NewServer(w.Handler)
	target, err := url.Parse(srv.URL)
	require.NoError(t, err)
	chk := openapitest.NewChecker(t)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = chk
	front := httptest.NewServer(proxy)
	t.Cleanup(func() {
		front.Close()
		srv.Close()
		// Destroy what the client made.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if list, err := w.Computers.List(ctx); err == nil {
			for _, c := range list {
				_, _ = w.Computers.Destroy(ctx, c.ID)
			}
		}
		w.Close()
	})

	const bot = "tsbot"
	marker := fmt.Sprintf("openapi-ts-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "dist/client.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "WORKER_URL="+front.URL, "WORKER_TOKEN="+token, "WORKER_BOT="+bot, "MARKER="+marker)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, "node dist/client.js: %s\n%s", stdout, stderr.String())

	type step struct {
		Step, ID, State, Provider, Dir, Head, Code string
		Status, Width, Height, Bytes               int
		Success                                    bool
		Result                                     struct {
			ExitCode int    `json:"exitCode"`
			Stdout   string `json:"stdout"`
		}
		Bots, Screens []string
	}
	steps := map[string]step{}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s step
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s), sc.Text())
		steps[s.Step] = s
		t.Logf("ts client: %.300s", sc.Text())
	}
	require.Equal(t, 201, steps["create"].Status)
	require.Equal(t, providers.KindLocal, steps["create"].Provider)
	require.Equal(t, 201, steps["bot"].Status)
	require.Equal(t, "bots/"+bot, steps["bot"].Dir)
	require.True(t, steps["shell"].Success)
	require.Zero(t, steps["shell"].Result.ExitCode)
	require.True(t, strings.HasPrefix(steps["shell"].Result.Stdout, marker+"\n"), "shell: %q", steps["shell"].Result.Stdout)
	require.True(t, steps["observe"].Success)
	require.Equal(t, 1280, steps["observe"].Width)
	require.Equal(t, 800, steps["observe"].Height)
	require.Equal(t, "ffd8ff", steps["observe"].Head, "a JPEG")
	require.Greater(t, steps["observe"].Bytes, 1000)
	require.Equal(t, "running", steps["computer"].State)
	require.Equal(t, []string{bot}, steps["computer"].Bots)
	require.Contains(t, steps["computer"].Screens, bot)
	require.Equal(t, 404, steps["denied"].Status)
	require.Equal(t, "not_found", steps["denied"].Code)

	seen := strings.Join(chk.Seen(), "\n")
	for _, want := range []string{"POST /v1/computers 201", "/bots 201", "/tools/shell 200", "/tools/computer_observe 200"} {
		require.Contains(t, seen, want, "the checker saw the client's exchanges")
	}
}
