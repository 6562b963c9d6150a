package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/open-bot/computer/apps/worker/internal/kubetest"
	"github.com/open-bot/computer/apps/worker/internal/providers"
)

// kubeTest is the test cluster (KUBE_TEST_KUBECONFIG: make test starts
// scripts/kube.sh and sets it; missing, the test skips, and fails under
// CI=true), held shared, and a namespace of the test's own.
func kubeTest(t testing.TB) (kc string, cs kubernetes.Interface, ns string) {
	t.Helper()
	kc = os.Getenv("KUBE_TEST_KUBECONFIG")
	if kc == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but KUBE_TEST_KUBECONFIG is not set (make test starts scripts/kube.sh)")
		}
		t.Skip("KUBE_TEST_KUBECONFIG is not set (scripts/kube.sh start)")
	}
	cs = kubeClient(t, kc)
	return kc, cs, kubeNamespace(t, cs)
}

// kubeWorkerEnv is a worker's settings for the kubernetes provider on the
// test cluster (kubeconfig kc, namespace ns): the computer image already
// on the node, small requests for this 2-core machine.
func kubeWorkerEnv(kc, ns string) map[string]string {
	image := envMap(nil)("WORKER_IMAGE")
	if image == "" {
		image = providers.DefaultImage
	}
	return map[string]string{"WORKER_PROVIDER": providers.KindKubernetes, "WORKER_IMAGE": image,
		"KUBECONFIG": kc, "KUBERNETES_NAMESPACE": ns, "KUBERNETES_IMAGE_PULL_POLICY": "Never", "KUBERNETES_HOME_SIZE": "1Gi",
		"KUBERNETES_CPU_REQUEST": "100m", "KUBERNETES_MEMORY_REQUEST": "256Mi"}
}

// kubeClient is an admin client of the test cluster (kubeconfig kc).
func kubeClient(t testing.TB, kc string) kubernetes.Interface {
	t.Helper()
	kubetest.Shared(t, kc)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return cs
}

// kubeNamespace makes a namespace of the test's own, deleted at its end.
func kubeNamespace(t testing.TB, cs kubernetes.Interface) string {
	t.Helper()
	var b [3]byte
	_, _ = rand.Read(b[:])
	ns := "obworker-" + hex.EncodeToString(b[:])
	_, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	return ns
}
