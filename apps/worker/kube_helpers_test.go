package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/open-bot/computer/apps/worker/internal/kubetest"
)

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
