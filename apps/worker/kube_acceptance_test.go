package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/open-bot/computer/apps/worker/internal/kubetest"
	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// podExec runs commands as root in a computer's pod through the test
// cluster's API server: kubectl exec of the binary scripts/kube.sh built.
type podExec struct{ script, kc, ns string }

func newPodExec(t testing.TB, kc, ns string) podExec {
	return podExec{script: kubetest.Script(t), kc: kc, ns: ns}
}

func (p podExec) kubectl(args ...string) *exec.Cmd {
	return exec.Command("bash", append([]string{p.script, "kubectl", "--kubeconfig", p.kc, "-n", p.ns}, args...)...)
}

func (p podExec) copyDir(t testing.TB, pod, dir string) {
	t.Helper()
	out, err := p.command(pod, "mkdir", "-p", "/opt/mockserve").CombinedOutput()
	require.NoError(t, err, "mkdir in the pod: %s", out)
	tarball, err := exec.Command("tar", "-c", "-C", dir, ".").Output()
	require.NoError(t, err)
	cmd := p.kubectl("exec", "-i", pod, "--", "tar", "-x", "-C", "/opt/mockserve")
	cmd.Stdin = bytes.NewReader(tarball)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "tar into the pod: %s", out)
}

// detach starts argv in the background of a shell that exits at once
// (argv is passed as arguments, never into the script's text).
func (p podExec) detach(t testing.TB, pod string, argv []string) {
	t.Helper()
	args := append([]string{"exec", pod, "--", "sh", "-c", `"$@" </dev/null >/dev/null 2>&1 &`, "sh"}, argv...)
	out, err := p.kubectl(args...).CombinedOutput()
	require.NoError(t, err, "exec %s in the pod: %s", argv[0], out)
}

func (p podExec) command(pod string, argv ...string) *exec.Cmd {
	return p.kubectl(append([]string{"exec", pod, "--"}, argv...)...)
}

// TestAcceptanceReplaceKubernetes: the acceptance flow on the kubernetes
// provider, on the cluster scripts/kube.sh runs (the computer image in its
// containerd, botd reached by port-forward through the API server). As on
// docker, alice's run is Codex in the pod, whose model (mockserve, the
// scripted model reading her screenshots) and page are on the pod's own
// loopback, and bob's run is the worker's loop with the host's model. Then:
// the pod and its home claim are deleted behind the worker's back and
// recover makes a new computer restored from the checkpoint the runs
// exported; the pod alone is deleted and recover makes it again on the
// same claim; a person takes alice's screen over through the worker (a
// raw RFB client moves the pod's X pointer, the agent is refused
// meanwhile, the release closes the connection).
func TestAcceptanceReplaceKubernetes(t *testing.T) {
	kc, cs, ns := kubeTest(t)
	in := newPodExec(t, kc, ns)
	dir := openDir(t, "wire-kube-")
	ms := buildMockserve(t, dir)
	flow := newContainerFlow(t, ms)
	for _, p := range flow.pages {
		p.in = in
	}

	env := kubeWorkerEnv(kc, ns)
	for k, v := range flow.env {
		env[k] = v
	}
	e := providerWorker(t, env, filepath.Join(dir, "machines"), flow.mates[0].bot)
	flow.addBots(t, e)
	c, err := e.w.Store.GetComputer(t.Context(), e.computer)
	require.NoError(t, err)
	require.Equal(t, providers.KindKubernetes, c.Provider)
	flow.start(c.ProviderRef)
	// The model key reaches the pod as a root-only file from a Secret: it
	// is nowhere in the pod's spec (which anyone who may read pods sees).
	pod, err := cs.CoreV1().Pods(ns).Get(t.Context(), c.ProviderRef, metav1.GetOptions{})
	require.NoError(t, err)
	spec := fmt.Sprintf("%+v", pod.Spec)
	require.NotContains(t, spec, scriptedKey, "the model key is in the pod's spec")
	require.Contains(t, spec, "MODEL_API_KEY_FILE")

	// The pod and its home claim are lost: a new computer, restored from
	// the checkpoint.
	finals := acceptanceReplace(t, e, flow.mates, func(ref, _ string) { losePodAndClaim(t, cs, ns, ref) }, flow.start, false)
	flow.check(t, finals)

	// The pod alone is lost: made again on the same claim, the home as it
	// was (no checkpoint imported: a file written after the last one is
	// there too).
	t.Run("pod deleted, claim kept", func(t *testing.T) {
		ctx := t.Context()
		before, err := e.w.Store.GetComputer(ctx, e.computer)
		require.NoError(t, err)
		claim, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, before.ProviderRef+"-home", metav1.GetOptions{})
		require.NoError(t, err)
		code, text := toolCall(t, e, "alice", "file_write", map[string]any{"path": "bots/alice/after-checkpoint.txt", "content": "only on the claim\n"})
		require.Equal(t, http.StatusOK, code, text)
		old, err := cs.CoreV1().Pods(ns).Get(ctx, before.ProviderRef, metav1.GetOptions{})
		require.NoError(t, err)
		zero := int64(0)
		require.NoError(t, cs.CoreV1().Pods(ns).Delete(ctx, before.ProviderRef, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
		after := recoverRunning(t, e)
		require.Equal(t, before.ProviderRef, after.ProviderRef, "the same computer, its pod made again")
		now, err := cs.CoreV1().Pods(ns).Get(ctx, after.ProviderRef, metav1.GetOptions{})
		require.NoError(t, err)
		require.NotEqual(t, old.UID, now.UID, "a new pod")
		again, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, after.ProviderRef+"-home", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, claim.UID, again.UID, "on the same claim")
		flow.start(after.ProviderRef)
		botd, err := e.w.Computers.Machine(ctx, e.computer)
		require.NoError(t, err)
		got, err := botd.ReadFile(ctx, "bots/alice/after-checkpoint.txt", 1<<10)
		require.NoError(t, err, "the file written after the last checkpoint is on the claim")
		require.Equal(t, "only on the claim\n", string(got))
		for _, m := range flow.mates {
			res, err := botd.ReadFile(ctx, "bots/"+m.bot+"/result.txt", 1<<20)
			require.NoError(t, err)
			require.Equal(t, "the button was pressed\n", string(res))
			var obs map[string]any
			require.Equal(t, http.StatusOK, e.do(t, "POST", "/tools/computer_observe", map[string]any{"botId": m.bot, "args": map[string]any{}}, &obs))
			waitFor(t, m.bot+"'s tab on the new pod", 3*time.Minute, func() bool {
				pages, err := botd.BrowserPages(ctx, m.bot)
				return err == nil && slices.Contains(pages, m.pageURL)
			})
			waitFor(t, m.bot+"'s tab loading the page signed in", time.Minute, m.page.SawCookie)
		}
	})

	t.Run("takeover through the worker", func(t *testing.T) {
		ctx := t.Context()
		const bot = "alice"
		row, err := e.w.Store.GetComputer(ctx, e.computer)
		require.NoError(t, err)
		status, text := toolCall(t, e, bot, "computer_observe", map[string]any{})
		require.Equal(t, http.StatusOK, status, text)
		m, err := e.w.Computers.Machine(ctx, e.computer)
		require.NoError(t, err)
		scs, err := m.Screens(ctx)
		require.NoError(t, err)
		display, slot := "", -1
		for _, s := range scs {
			if s.ID == bot {
				display, slot = s.Display, s.Slot
			}
		}
		require.NotEmpty(t, display, "alice's screen: %+v", scs)
		pointer := func() (int, int) {
			out, err := in.command(row.ProviderRef, "env", "DISPLAY="+display, fmt.Sprintf("XAUTHORITY=/home/desktop/.Xauthority-%d", slot),
				"xdotool", "getmouselocation", "--shell").CombinedOutput()
			require.NoError(t, err, "xdotool in the pod: %s", out)
			return mouseLocation(out)
		}
		status, link, msg := takeoverCall(t, e, "POST", bot, "")
		require.Equal(t, http.StatusOK, status, msg)
		require.True(t, strings.HasPrefix(link.URL, e.url), "a worker control link, got %q", link.URL)
		released := false
		defer func() {
			if !released {
				takeoverCall(t, e, "DELETE", bot, "")
			}
		}()
		rfb := connectControl(t, link.URL)
		require.NoError(t, rfb.pointer(0, 123, 234))
		waitFor(t, "the pointer to move on the pod's X", 30*time.Second, func() bool {
			x, y := pointer()
			return x == 123 && y == 234
		})
		status, text = toolCall(t, e, bot, "computer_observe", map[string]any{})
		require.NotEqual(t, http.StatusOK, status, "the agent got the screen while a person holds it: %s", text)
		require.Contains(t, text, "user_has_control")
		status, _, _ = takeoverCall(t, e, "DELETE", bot, "")
		require.Equal(t, http.StatusOK, status)
		released = true
		_ = rfb.pointer(0, 321, 123)
		requireClosedByServer(t, rfb, 20*time.Second, "the released control connection")
		x, y := pointer()
		require.Equal(t, []int{123, 234}, []int{x, y}, "input after the release never reached X")
		status, text = toolCall(t, e, bot, "computer_observe", map[string]any{})
		require.Equal(t, http.StatusOK, status, "the agent has its screen back: %s", text)
	})

	t.Run("destroyed keeping the home, restored into a new computer", func(t *testing.T) {
		ctx := t.Context()
		row, err := e.w.Store.GetComputer(ctx, e.computer)
		require.NoError(t, err)
		// A file no checkpoint holds: only the claim has it.
		code, text := toolCall(t, e, "bob", "file_write", map[string]any{"path": "bots/bob/kept-volume.txt", "content": "kept on the volume\n"})
		require.Equal(t, http.StatusOK, code, text)
		claim, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, row.ProviderRef+"-home", metav1.GetOptions{})
		require.NoError(t, err)
		var out struct {
			RestoreKey string `json:"restoreKey"`
			Computer   struct{ State, LastError string }
		}
		require.Equal(t, http.StatusOK, e.do(t, "DELETE", "?keepHome=true", nil, &out))
		require.Equal(t, "destroyed", out.Computer.State, out.Computer.LastError)
		require.NotEmpty(t, out.RestoreKey, "the kept home's restore key")
		// The computer's pod, Service and Secret go; its home claim stays,
		// marked kept (and its checkpoints stay in the home store).
		waitFor(t, "the destroyed computer's pod and secret to go", 2*time.Minute, func() bool {
			_, perr := cs.CoreV1().Pods(ns).Get(context.Background(), row.ProviderRef, metav1.GetOptions{})
			_, serr := cs.CoreV1().Secrets(ns).Get(context.Background(), row.ProviderRef, metav1.GetOptions{})
			_, verr := cs.CoreV1().Services(ns).Get(context.Background(), row.ProviderRef, metav1.GetOptions{})
			return apierrors.IsNotFound(perr) && apierrors.IsNotFound(serr) && apierrors.IsNotFound(verr)
		})
		kept, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, row.ProviderRef+"-home", metav1.GetOptions{})
		require.NoError(t, err, "the home claim is kept")
		require.Equal(t, claim.UID, kept.UID)
		require.Nil(t, kept.DeletionTimestamp)
		require.Equal(t, "true", kept.Labels["dev.open-bot/kept-home"])
		body, _ := json.Marshal(map[string]any{"scope": map[string]string{"team": "t1"}})
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/computers", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Restore-Key", out.RestoreKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var created struct {
			Computer struct {
				ID, State, LastError string
			} `json:"computer"`
			Capability string `json:"capability"`
			Restored   bool   `json:"restored"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.True(t, created.Restored, "the kept home was restored")
		require.Equal(t, "running", created.Computer.State, created.Computer.LastError)
		e.computer, e.capa = created.Computer.ID, created.Capability
		// The new computer's pod runs on the kept claim, taken over: the
		// file no checkpoint holds is there.
		now, err := e.w.Store.GetComputer(ctx, e.computer)
		require.NoError(t, err)
		require.NotEqual(t, row.ProviderRef, now.ProviderRef, "a new machine")
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, now.ProviderRef, metav1.GetOptions{})
		require.NoError(t, err)
		var claimName string
		for _, v := range pod.Spec.Volumes {
			if v.Name == "home" && v.PersistentVolumeClaim != nil {
				claimName = v.PersistentVolumeClaim.ClaimName
			}
		}
		require.Equal(t, kept.Name, claimName, "the new pod's home is the kept claim")
		taken, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, kept.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, claim.UID, taken.UID)
		require.Empty(t, taken.Labels["dev.open-bot/kept-home"], "no longer kept: the new computer's")
		require.Equal(t, now.ProviderRef, taken.Labels["dev.open-bot/machine"])
		botd, err := e.w.Computers.Machine(ctx, e.computer)
		require.NoError(t, err)
		got, err := botd.ReadFile(ctx, "bots/bob/kept-volume.txt", 1<<10)
		require.NoError(t, err, "the file written after the last checkpoint came back with the claim")
		require.Equal(t, "kept on the volume\n", string(got))
		for _, m := range flow.mates {
			res, err := botd.ReadFile(ctx, "bots/"+m.bot+"/result.txt", 1<<20)
			require.NoError(t, err, "%s's file in the new computer", m.bot)
			require.Equal(t, "the button was pressed\n", string(res))
		}

		// A destroy without keepHome deletes the claim it took over.
		var gone struct {
			Computer struct{ State, LastError string }
		}
		require.Equal(t, http.StatusOK, e.do(t, "DELETE", "", nil, &gone))
		require.Equal(t, "destroyed", gone.Computer.State, gone.Computer.LastError)
		waitFor(t, "the taken-over claim to go with its computer", 2*time.Minute, func() bool {
			_, cerr := cs.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), kept.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(cerr)
		})
	})
}

// losePodAndClaim deletes a computer's pod and its home claim behind the
// worker's back and waits until both are gone (the claim's protection
// holds it until its pod is).
func losePodAndClaim(t *testing.T, cs kubernetes.Interface, ns, ref string) {
	t.Helper()
	ctx := t.Context()
	zero := int64(0)
	require.NoError(t, cs.CoreV1().Pods(ns).Delete(ctx, ref, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	require.NoError(t, cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, ref+"-home", metav1.DeleteOptions{}))
	waitFor(t, "the pod and its claim to be gone", 2*time.Minute, func() bool {
		_, perr := cs.CoreV1().Pods(ns).Get(context.Background(), ref, metav1.GetOptions{})
		_, cerr := cs.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), ref+"-home", metav1.GetOptions{})
		return apierrors.IsNotFound(perr) && apierrors.IsNotFound(cerr)
	})
}
