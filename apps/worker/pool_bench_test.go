package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// Displays 1244-1259 and loopback ports 32700-32739 are this benchmark's
// alone (4 local slots of 4 screens).
const (
	poolBenchDisplayBase = 1244
	poolBenchPortBase    = 32700
	poolBenchSlots       = "4"
	poolBenchRounds      = 6
)

// BenchmarkPool (issue 24.3): per provider (local, docker), side by side in
// one run: create -> first observe (POST /v1/computers, POST …/bots, the
// bot's first computer_observe with its JPEG), p50/p90 of poolBenchRounds,
// without a pool (cold) and from a warm pool (WORKER_POOL=<kind>=1, the
// pool refilled before each round, untimed); the create alone beside each;
// and what one idle pooled machine costs: CPU % of a core over 5 s and the
// PSS of its processes (/proc/<pid>/smaps_rollup, botd and its children;
// docker: the container's processes).
func BenchmarkPool(b *testing.B) {
	b.Run("local", func(b *testing.B) {
		requireIntegration(b, "codex", "Xvfb", "chromium", "x11vnc", "xfwm4")
		dir := openDir(b, "wire-poolbench-")
		bin := buildBotd(b, dir)
		env := func(pool string) map[string]string {
			return map[string]string{"WORKER_PROVIDER": providers.KindLocal, "WORKER_BOTD_BIN": bin, "WORKER_POOL": pool,
				"WORKER_LOCAL_DISPLAY_BASE": fmt.Sprint(poolBenchDisplayBase), "WORKER_LOCAL_PORT_BASE": fmt.Sprint(poolBenchPortBase),
				"WORKER_LOCAL_SLOTS": poolBenchSlots}
		}
		benchPool(b, providers.KindLocal, dir, env, func(pe *poolEnv, ref string) int { return pe.w.setup.Local.PID(ref) })
	})
	b.Run("docker", func(b *testing.B) {
		image := envMap(nil)("WORKER_IMAGE")
		if image == "" {
			image = providers.DefaultImage
		}
		if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", image).CombinedOutput(); err != nil {
			unavailableB(b, fmt.Sprintf("no Docker engine with image %s (make image): %s", image, strings.TrimSpace(string(out))))
		}
		dir := openDir(b, "wire-poolbench-docker-")
		env := func(pool string) map[string]string {
			return map[string]string{"WORKER_PROVIDER": providers.KindDocker, "WORKER_IMAGE": image, "WORKER_POOL": pool}
		}
		benchPool(b, providers.KindDocker, dir, env, func(_ *poolEnv, ref string) int {
			out, err := exec.Command("docker", "inspect", "--format", "{{.State.Pid}}", ref).Output()
			require.NoError(b, err)
			pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
			require.NoError(b, err)
			return pid
		})
	})
	b.Run("kubernetes", func(b *testing.B) {
		kc := os.Getenv("KUBE_TEST_KUBECONFIG")
		if kc == "" {
			unavailableB(b, "KUBE_TEST_KUBECONFIG is not set (scripts/kube.sh start)")
		}
		image := envMap(nil)("WORKER_IMAGE")
		if image == "" {
			image = providers.DefaultImage
		}
		cs := kubeClient(b, kc)
		ns := kubeNamespace(b, cs)
		dir := openDir(b, "wire-poolbench-kube-")
		env := func(pool string) map[string]string {
			return map[string]string{"WORKER_PROVIDER": providers.KindKubernetes, "WORKER_IMAGE": image, "WORKER_POOL": pool,
				"KUBECONFIG": kc, "KUBERNETES_NAMESPACE": ns, "KUBERNETES_IMAGE_PULL_POLICY": "Never", "KUBERNETES_HOME_SIZE": "1Gi",
				"KUBERNETES_CPU_REQUEST": "100m", "KUBERNETES_MEMORY_REQUEST": "256Mi"}
		}
		benchPool(b, providers.KindKubernetes, dir, env, func(_ *poolEnv, ref string) int { return podRoot(b, cs, ns, ref) })
	})
}

// podRoot is the host pid of the first process of pod ref's computer
// container (the test cluster's node is this host): the process in the
// pod's cgroup, other than the pause container's, whose parent is not.
func podRoot(b *testing.B, cs kubernetes.Interface, ns, ref string) int {
	p, err := cs.CoreV1().Pods(ns).Get(b.Context(), ref, metav1.GetOptions{})
	require.NoError(b, err)
	uid := strings.ReplaceAll(string(p.UID), "-", "_")
	pp := parents()
	in := map[int]bool{}
	for n := range pp {
		cg, err := os.ReadFile("/proc/" + strconv.Itoa(n) + "/cgroup")
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(n) + "/comm")
		if err == nil && (strings.Contains(string(cg), "pod"+string(p.UID)) || strings.Contains(string(cg), "pod"+uid)) &&
			strings.TrimSpace(string(comm)) != "pause" {
			in[n] = true
		}
	}
	for n := range in {
		if !in[pp[n]] {
			return n
		}
	}
	return 0
}

func unavailableB(b *testing.B, msg string) {
	if os.Getenv("CI") == "true" {
		b.Fatal("CI=true but " + msg)
	}
	b.Skip(msg)
}

func benchPool(b *testing.B, kind, dir string, env func(pool string) map[string]string, pid func(pe *poolEnv, ref string) int) {
	for i := 0; i < b.N; i++ {
		// Cold: no pool.
		cold := newPoolWorker(b, env(""), filepath.Join(dir, "machines-cold"))
		coldFirst, coldCreate := createRounds(b, cold, kind, "cold", func() {})
		closeWorker(b, cold)

		// Warm: one machine kept ready.
		warm := newPoolWorker(b, env(kind+"=1"), filepath.Join(dir, "machines-pool"))
		poolFirst, poolCreate := createRounds(b, warm, kind, "pool", func() { warm.ready(b, kind, 1) })

		// An idle pooled machine: its processes' CPU over 5 s and PSS.
		ids := warm.ready(b, kind, 1)
		ref := warm.w.Computers.PooledRef(ids[0])
		root := pid(warm, ref)
		require.Positive(b, root, "the pooled machine's root process")
		time.Sleep(2 * time.Second) // past its own start
		cpu := treeCPUPercent(root, 5*time.Second)
		pss := treePSSMB(root)
		closeWorker(b, warm)

		b.ReportMetric(pct(coldFirst, 50), "cold-p50_ms")
		b.ReportMetric(pct(coldFirst, 90), "cold-p90_ms")
		b.ReportMetric(pct(poolFirst, 50), "pool-p50_ms")
		b.ReportMetric(pct(poolFirst, 90), "pool-p90_ms")
		b.ReportMetric(pct(coldCreate, 50), "cold-create-p50_ms")
		b.ReportMetric(pct(poolCreate, 50), "pool-create-p50_ms")
		b.ReportMetric(cpu, "idle-cpu-%")
		b.ReportMetric(pss, "idle-pss_MB")
	}
}

// closeWorker destroys what pe made and closes its worker now (its pool
// with it), so the next one starts on a quiet host.
func closeWorker(b *testing.B, pe *poolEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pe.mu.Lock()
	made := pe.made
	pe.made = nil
	pe.mu.Unlock()
	for _, id := range made {
		_, _ = pe.w.Computers.Destroy(ctx, id)
	}
	pe.w.Computers.ClosePool(ctx)
}

// createRounds times poolBenchRounds rounds of create -> first observe
// (and the create alone), each computer destroyed after its round (untimed)
// and before runs first (untimed).
func createRounds(b *testing.B, pe *poolEnv, kind, label string, before func()) (first, create []time.Duration) {
	for n := range poolBenchRounds {
		before()
		t0 := time.Now()
		e := pe.create(b, map[string]any{"session": fmt.Sprintf("bench-%s-%s-%d", kind, label, n)})
		created := time.Since(t0)
		observeFirst(b, e, "alice")
		first = append(first, time.Since(t0))
		create = append(create, created)
		require.Equal(b, http.StatusOK, e.do(b, "DELETE", "", nil, nil))
	}
	b.Logf("%s %s: create -> first observe %v (create alone %v)", kind, label, first, create)
	return first, create
}

// pct is the q-th percentile (nearest rank) of d, in ms.
func pct(d []time.Duration, q int) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*q + 99) / 100
	i = max(1, min(i, len(s)))
	return float64(s[i-1].Microseconds()) / 1000
}

// parents is every process's parent pid, by pid (/proc/<pid>/stat).
func parents() map[int]int {
	out := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 {
			out[n], _ = strconv.Atoi(f[1])
		}
	}
	return out
}

// tree is pid and every descendant.
func tree(pid int) []int {
	children := map[int][]int{}
	for n, pp := range parents() {
		children[pp] = append(children[pp], n)
	}
	out := []int{}
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		out = append(out, p)
	}
	return out
}

// ticks is a process's user+system CPU time in clock ticks.
func ticks(pid int) int64 {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k
}

// treeCPUPercent is the CPU the tree under pid used over d, in % of one
// core (USER_HZ is 100 on Linux).
func treeCPUPercent(pid int, d time.Duration) float64 {
	before := map[int]int64{}
	for _, p := range tree(pid) {
		before[p] = ticks(p)
	}
	time.Sleep(d)
	var used int64
	for _, p := range tree(pid) {
		used += ticks(p) - before[p]
	}
	return float64(used) / 100 / d.Seconds() * 100
}

// treePSSMB is the summed PSS (MB) of the tree under pid.
func treePSSMB(pid int) float64 {
	var kb float64
	for _, p := range tree(pid) {
		f, err := os.Open("/proc/" + strconv.Itoa(p) + "/smaps_rollup")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
				n, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
				kb += n
				break
			}
		}
		f.Close()
	}
	return kb / 1024
}
