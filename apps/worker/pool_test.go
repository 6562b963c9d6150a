package main

// Issue 24.3: the warm pool on real providers (local and docker). A create
// takes a pooled machine and the pool refills; a pooled machine that died
// is not handed out (and is replaced); two teams never get the same machine
// and see nothing of each other; a scope's kept home (its earlier computer
// destroyed with keepHome=true) is restored into a pooled machine with the
// restore key that destroy answered, and only with it.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/providers"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Displays 1220-1243 and loopback ports 32600-32659 are these tests' alone
// (pool_bench_test.go has 1244-1259 and 32700-32739).
const (
	poolDisplayBase = 1220
	poolPortBase    = 32600
	poolSlots       = "6"
)

// poolEnv is a worker with a warm pool and no computer yet.
type poolEnv struct {
	url, token string
	w          *worker
	machines   string
	made       []string // computers to destroy at the end
	mu         sync.Mutex
}

// newPoolWorker serves a worker in-process with env (WORKER_POOL among it).
func newPoolWorker(t testing.TB, env map[string]string, machines string) *poolEnv {
	t.Helper()
	pe := &poolEnv{token: "worker-token-0123456789", machines: machines}
	w, err := newWorker(t.Context(), serveConfig{DataDir: t.TempDir(), Provider: env["WORKER_PROVIDER"], Token: pe.token,
		Model: "scripted-model", ModelProvider: "botd", Approvals: "decline", MachinesDir: machines,
		Getenv: envMap(env)}, testLog(t))
	require.NoError(t, err)
	srv := httptest.NewServer(w.Handler)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		pe.mu.Lock()
		made := pe.made
		pe.mu.Unlock()
		for _, id := range made {
			_, _ = w.Computers.Destroy(ctx, id)
		}
		w.Close()
	})
	pe.url, pe.w = srv.URL, w
	return pe
}

// create makes a computer for scope and returns it as a workerEnv.
func (pe *poolEnv) create(t testing.TB, scope map[string]any) *workerEnv {
	t.Helper()
	return pe.createRestoring(t, scope, "", false)
}

// createRestoring is create presenting restore key key (X-Restore-Key;
// none when "") and checking the answer's restored is want.
func (pe *poolEnv) createRestoring(t testing.TB, scope map[string]any, key string, want bool) *workerEnv {
	t.Helper()
	e, err := pe.tryCreate(t.Context(), scope, key, want)
	require.NoError(t, err)
	return e
}

// tryCreate is createRestoring reporting what went wrong as an error instead
// of failing a test, so goroutines other than the test's may call it (t's
// FailNow is only valid on the test's goroutine).
func (pe *poolEnv) tryCreate(ctx context.Context, scope map[string]any, key string, want bool) (*workerEnv, error) {
	var created struct {
		Computer struct {
			ID, State, LastError string
		} `json:"computer"`
		Capability string `json:"capability"`
		Restored   bool   `json:"restored"`
	}
	b, err := json.Marshal(map[string]any{"scope": scope})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", pe.url+"/v1/computers", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+pe.token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-Restore-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST /v1/computers: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("POST /v1/computers: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusCreated {
		// An error answer is the JSON envelope: no capability in it.
		return nil, fmt.Errorf("POST /v1/computers: status %d, want %d: %.500s", resp.StatusCode, http.StatusCreated, body)
	}
	if err := json.Unmarshal(body, &created); err != nil {
		return nil, fmt.Errorf("POST /v1/computers: decoding the answer: %w", err)
	}
	if created.Computer.ID != "" {
		pe.mu.Lock()
		pe.made = append(pe.made, created.Computer.ID)
		pe.mu.Unlock()
	}
	if created.Restored != want {
		return nil, fmt.Errorf("the answer's restored is %v, want %v", created.Restored, want)
	}
	if created.Computer.State != "running" {
		return nil, fmt.Errorf("the new computer %s is %q, want running: %s", created.Computer.ID, created.Computer.State, created.Computer.LastError)
	}
	return &workerEnv{url: pe.url, token: pe.token, computer: created.Computer.ID, capa: created.Capability, w: pe.w}, nil
}

// destroy destroys e's computer (its checkpoints kept when keepHome) and
// returns the answer's restore key ("" when none).
func (pe *poolEnv) destroy(t testing.TB, e *workerEnv, keepHome bool) string {
	t.Helper()
	q := ""
	if keepHome {
		q = "?keepHome=true"
	}
	var out struct {
		RestoreKey string `json:"restoreKey"`
	}
	require.Equal(t, http.StatusOK, e.do(t, "DELETE", q, nil, &out))
	return out.RestoreKey
}

// ready waits until kind's pool holds want ready machines none of which is
// in not, and returns their computer ids (oldest first: hand-out order).
func (pe *poolEnv) ready(t testing.TB, kind string, want int, not ...string) []string {
	t.Helper()
	var ids []string
	waitFor(t, fmt.Sprintf("%d ready %s machines in the pool", want, kind), 3*time.Minute, func() bool {
		ids = nil
		for _, k := range pe.w.Computers.Pool() {
			if k.Provider != kind {
				continue
			}
			for _, m := range k.Ready {
				if slices.Contains(not, m.Computer) {
					return false
				}
				ids = append(ids, m.Computer)
			}
		}
		return len(ids) == want
	})
	return ids
}

// ref is computer id's provider ref as the store has it.
func (pe *poolEnv) ref(t testing.TB, id string) string {
	t.Helper()
	c, err := pe.w.Store.GetComputer(t.Context(), id)
	require.NoError(t, err)
	return c.ProviderRef
}

// observe adds bot to e's computer and takes its first screenshot.
func observeFirst(t testing.TB, e *workerEnv, bot string) {
	t.Helper()
	require.Equal(t, http.StatusCreated, e.do(t, "POST", "/bots", map[string]string{"id": bot}, nil))
	st, res := e.tool(t, bot, "computer_observe", map[string]any{})
	require.Equal(t, http.StatusOK, st, res.text())
	require.True(t, res.Success, res.text())
	img := ""
	for _, c := range res.Content {
		if c.Type == "image" {
			img = c.ImageURL
		}
	}
	require.True(t, strings.HasPrefix(img, "data:image/jpeg;base64,"), "the first observation has a JPEG: %.200s", res.text())
}

// TestPoolLocal: the warm pool on the local provider.
func TestPoolLocal(t *testing.T) {
	requireIntegration(t, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
	dir := openDir(t, "wire-pool-local-")
	machines := filepath.Join(dir, "machines")
	env := map[string]string{
		"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": buildBotd(t, dir), "WORKER_POOL": "local=2",
		"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(poolDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(poolPortBase), "WORKER_LOCAL_SLOTS": poolSlots,
	}
	pe := newPoolWorker(t, env, machines)
	testPool(t, pe, providers.KindLocal, func(t *testing.T, id, ref string) {
		// botd SIGKILLed and its home gone (a rename, then removed at
		// leisure): it is not started again.
		pid := pe.w.setup.Local.PID(ref)
		require.NotZero(t, pid, "the pooled machine's botd runs")
		home := filepath.Join(machines, "homes", id+".local", "home")
		require.DirExists(t, home)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		lost := filepath.Join(machines, "lost-"+id)
		require.NoError(t, os.Rename(home, lost))
		t.Cleanup(func() { _ = os.RemoveAll(lost) })
	}, func(ref string) bool {
		_, err := os.Stat(filepath.Join(machines, "computers", ref))
		return os.IsNotExist(err)
	})
}

// TestPoolDocker: the warm pool on the docker provider.
func TestPoolDocker(t *testing.T) {
	if os.Geteuid() != 0 {
		requireIntegration(t) // root: the engine's socket and the root-only token files
	}
	image := envMap(nil)("WORKER_IMAGE")
	if image == "" {
		image = providers.DefaultImage
	}
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", image).CombinedOutput(); err != nil {
		msg := fmt.Sprintf("no Docker engine with image %s (make image): %s", image, strings.TrimSpace(string(out)))
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but " + msg)
		}
		t.Skip(msg)
	}
	dir := openDir(t, "wire-pool-docker-")
	env := map[string]string{"WORKER_PROVIDER": providers.KindDocker, "WORKER_IMAGE": image, "WORKER_POOL": "docker=2"}
	pe := newPoolWorker(t, env, filepath.Join(dir, "machines"))
	gone := func(ref string) bool { return exec.Command("docker", "inspect", ref).Run() != nil }
	testPool(t, pe, providers.KindDocker, func(t *testing.T, id, ref string) {
		out, err := exec.Command("docker", "rm", "-f", ref).CombinedOutput()
		require.NoError(t, err, "docker rm -f: %s", out)
		require.True(t, gone(ref))
	}, gone)
}

// testPool runs the pool's cases on pe, whose pool keeps 2 machines of
// kind. kill makes pooled machine id (ref) die behind the worker's back;
// gone reports whether the machine behind ref was destroyed.
func testPool(t *testing.T, pe *poolEnv, kind string, kill func(t *testing.T, id, ref string), gone func(ref string) bool) {
	t.Run("a create takes a pooled machine and the pool refills", func(t *testing.T) {
		pooled := pe.ready(t, kind, 2)
		e := pe.create(t, map[string]any{"team": "pool-take"})
		require.Equal(t, pooled[0], e.computer, "the create took the oldest pooled machine (ready: %v)", pooled)
		observeFirst(t, e, "alice")
		refilled := pe.ready(t, kind, 2, e.computer)
		require.Contains(t, refilled, pooled[1], "the other pooled machine is still there")
		pe.destroy(t, e, false)
	})

	t.Run("a pooled machine that died is not handed out", func(t *testing.T) {
		pooled := pe.ready(t, kind, 2)
		deadID := pooled[0] // the next one a create would take
		ref := pe.w.Computers.PooledRef(deadID)
		require.NotEmpty(t, ref)
		kill(t, deadID, ref)
		e := pe.create(t, map[string]any{"team": "pool-dead"})
		require.NotEqual(t, deadID, e.computer, "the dead pooled machine was handed out")
		require.NotEqual(t, ref, pe.ref(t, e.computer))
		require.Equal(t, pooled[1], e.computer, "the create took the next, healthy, pooled machine")
		observeFirst(t, e, "alice")
		waitFor(t, "the dead pooled machine to be destroyed", 2*time.Minute, func() bool { return gone(ref) })
		refilled := pe.ready(t, kind, 2, deadID, e.computer)
		require.NotContains(t, refilled, deadID)
		pe.destroy(t, e, false)
	})

	t.Run("two teams never get the same machine and see nothing of each other", func(t *testing.T) {
		pooled := pe.ready(t, kind, 2)
		// Both creates at once; the goroutines only record what happened
		// (require there would call FailNow off the test's goroutine), the
		// test's goroutine asserts on it after Wait.
		var a, b *workerEnv
		var errA, errB error
		var wg sync.WaitGroup
		wg.Go(func() { a, errA = pe.tryCreate(t.Context(), map[string]any{"team": "pool-a"}, "", false) })
		wg.Go(func() { b, errB = pe.tryCreate(t.Context(), map[string]any{"team": "pool-b"}, "", false) })
		wg.Wait()
		require.NoError(t, errA, "team a's create")
		require.NoError(t, errB, "team b's create")
		require.NotNil(t, a)
		require.NotNil(t, b)
		require.ElementsMatch(t, pooled, []string{a.computer, b.computer}, "both creates took pooled machines")
		require.NotEqual(t, a.computer, b.computer)
		require.NotEqual(t, pe.ref(t, a.computer), pe.ref(t, b.computer), "two teams, two machines")
		ca, err := pe.w.Store.GetComputer(t.Context(), a.computer)
		require.NoError(t, err)
		cb, err := pe.w.Store.GetComputer(t.Context(), b.computer)
		require.NoError(t, err)
		ha, hb := pe.w.Computers.HomeDir(ca, kind), pe.w.Computers.HomeDir(cb, kind)
		if kind == providers.KindKubernetes {
			// The home is each pod's own claim (<ref>-home): two refs, two claims.
			require.Empty(t, ha, "no worker-owned home on a cluster")
		} else {
			require.NotEmpty(t, ha)
			require.NotEqual(t, ha, hb, "two teams, two homes")
		}

		require.Equal(t, http.StatusCreated, a.do(t, "POST", "/bots", map[string]string{"id": "ann"}, nil))
		require.Equal(t, http.StatusCreated, b.do(t, "POST", "/bots", map[string]string{"id": "ann"}, nil))
		st, res := a.tool(t, "ann", "file_write", map[string]any{"path": "bots/ann/team-a.txt", "content": "team a only\n"})
		require.Equal(t, http.StatusOK, st)
		require.True(t, res.Success, res.text())
		st, res = a.tool(t, "ann", "file_read", map[string]any{"path": "bots/ann/team-a.txt"})
		require.Equal(t, http.StatusOK, st)
		require.True(t, res.Success, res.text())
		require.Contains(t, res.text(), "team a only")
		// Team b's computer: the same path holds nothing, and no file of
		// team a's is anywhere in its workspace.
		_, res = b.tool(t, "ann", "file_read", map[string]any{"path": "bots/ann/team-a.txt"})
		require.False(t, res.Success, "team b reads team a's file: %s", res.text())
		st, res = b.tool(t, "ann", "shell", map[string]any{"argv": []string{"sh", "-c", "find . -name 'team-a*'; grep -rl 'team a only' . 2>/dev/null; echo done"}})
		require.Equal(t, http.StatusOK, st)
		require.True(t, res.Success, res.text())
		require.NotContains(t, res.text(), "team-a", "team b's workspace: %s", res.text())
		// Neither capability reaches the other's computer.
		cross := &workerEnv{url: pe.url, token: pe.token, computer: b.computer, capa: a.capa}
		require.Equal(t, http.StatusNotFound, cross.do(t, "GET", "", nil, nil))
		cross = &workerEnv{url: pe.url, token: pe.token, computer: a.computer, capa: b.capa}
		require.Equal(t, http.StatusNotFound, cross.do(t, "GET", "", nil, nil))
		pe.destroy(t, a, false)
		pe.destroy(t, b, false)
	})

	t.Run("the scope's checkpoint is restored into a pooled machine", func(t *testing.T) {
		pe.ready(t, kind, 2)
		scope := map[string]any{"session": "pool-s1"}
		first := pe.create(t, scope)
		require.Equal(t, http.StatusCreated, first.do(t, "POST", "/bots", map[string]string{"id": "carol"}, nil))
		st, res := first.tool(t, "carol", "file_write", map[string]any{"path": "bots/carol/note.txt", "content": "kept across computers\n"})
		require.Equal(t, http.StatusOK, st)
		require.True(t, res.Success, res.text())
		require.Equal(t, http.StatusOK, first.do(t, "POST", "/checkpoint", nil, nil))
		key := pe.destroy(t, first, true)
		require.NotEmpty(t, key, "the keepHome destroy answers a restore key")

		// Without the key a pooled machine starts empty (issue 36, row 1).
		pooled := pe.ready(t, kind, 2, first.computer)
		bare := pe.create(t, scope)
		require.Equal(t, pooled[0], bare.computer, "the create took a pooled machine")
		require.Equal(t, http.StatusCreated, bare.do(t, "POST", "/bots", map[string]string{"id": "carol"}, nil))
		_, res = bare.tool(t, "carol", "file_read", map[string]any{"path": "bots/carol/note.txt"})
		require.False(t, res.Success, "the scope's kept home without its key: %s", res.text())
		pe.destroy(t, bare, false)

		pooled = pe.ready(t, kind, 2, bare.computer)
		second := pe.createRestoring(t, scope, key, true)
		if kind == providers.KindKubernetes {
			// The kept home claim is taken over by a machine made for it
			// (a pooled pod has a claim of its own): not from the pool.
			require.NotContains(t, pooled, second.computer, "a machine made for the kept claim")
		} else {
			require.Equal(t, pooled[0], second.computer, "the create took a pooled machine")
		}
		require.Equal(t, http.StatusCreated, second.do(t, "POST", "/bots", map[string]string{"id": "carol"}, nil))
		st, res = second.tool(t, "carol", "file_read", map[string]any{"path": "bots/carol/note.txt"})
		require.Equal(t, http.StatusOK, st)
		require.True(t, res.Success, "the scope's checkpoint in the pooled machine: %s", res.text())
		require.Contains(t, res.text(), "kept across computers")

		// Another scope starts empty.
		pe.ready(t, kind, 2, second.computer)
		other := pe.create(t, map[string]any{"session": "pool-s2"})
		require.Equal(t, http.StatusCreated, other.do(t, "POST", "/bots", map[string]string{"id": "carol"}, nil))
		_, res = other.tool(t, "carol", "file_read", map[string]any{"path": "bots/carol/note.txt"})
		require.False(t, res.Success, "another scope got the checkpoint: %s", res.text())
		pe.destroy(t, second, false)
		pe.destroy(t, other, false)
	})

	t.Run("shutdown destroys the pooled machines", func(t *testing.T) {
		pe.ready(t, kind, 2)
		var refs []string
		for _, k := range pe.w.Computers.Pool() {
			for _, m := range k.Ready {
				refs = append(refs, pe.w.Computers.PooledRef(m.Computer))
			}
		}
		require.Len(t, refs, 2)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		pe.w.Computers.ClosePool(ctx)
		for _, ref := range refs {
			require.True(t, gone(ref), "pooled machine %s outlived the pool", ref)
		}
		require.Empty(t, pe.w.Computers.Pool()[0].Ready)
	})
}

// TestPoolBadValueFailsStart: a WORKER_POOL the worker cannot keep stops
// its start with a message naming the variable.
func TestPoolBadValueFailsStart(t *testing.T) {
	for _, tc := range []struct{ pool, want string }{
		{"local=lots", "WORKER_POOL=\"local=lots\": local=lots: want a whole number from 0 to 16"},
		{"e2b=1", "\"e2b\" cannot be pooled"},
		{"docker=1,docker=2", "docker is given twice"},
	} {
		data := t.TempDir()
		_, err := newWorker(t.Context(), serveConfig{DataDir: data, MachinesDir: filepath.Join(data, "machines"), Provider: providers.KindAttach, Token: "worker-token-0123456789",
			Model: "m", Approvals: "decline", Getenv: envMap(map[string]string{"WORKER_POOL": tc.pool})}, testLog(t))
		require.ErrorContains(t, err, tc.want, "WORKER_POOL=%s", tc.pool)
	}
}

// TestPoolKubernetes: the warm pool on the kubernetes provider, on the
// test cluster scripts/kube.sh runs (KUBE_TEST_KUBECONFIG): ready pods,
// taken by creates; a pooled pod deleted behind the worker's back is not
// handed out and its computer's resources go.
func TestPoolKubernetes(t *testing.T) {
	kc, cs, ns := kubeTest(t)
	dir := openDir(t, "wire-pool-kube-")
	env := kubeWorkerEnv(kc, ns)
	env["WORKER_POOL"] = "kubernetes=2"
	pe := newPoolWorker(t, env, filepath.Join(dir, "machines"))
	gone := func(ref string) bool {
		_, err := cs.CoreV1().Secrets(ns).Get(context.Background(), ref, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	testPool(t, pe, providers.KindKubernetes, func(t *testing.T, id, ref string) {
		zero := int64(0)
		require.NoError(t, cs.CoreV1().Pods(ns).Delete(t.Context(), ref, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	}, gone)
}
