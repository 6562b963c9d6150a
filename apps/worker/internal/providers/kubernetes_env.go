package providers

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubernetesFromEnv makes the kubernetes provider when wanted
// (WORKER_PROVIDER=kubernetes) or configured (KUBERNETES_NAMESPACE set);
// nil otherwise.
//
//	KUBECONFIG                      (in-cluster)  the cluster; unset: the worker's own service account
//	KUBERNETES_NAMESPACE            open-bot      where every computer's resources go (must exist)
//	KUBERNETES_CONNECT              port-forward  or service (a worker inside the cluster)
//	KUBERNETES_STORAGE_CLASS        (default)     the home claims' storage class
//	KUBERNETES_HOME_SIZE            10Gi
//	KUBERNETES_CPU_REQUEST/LIMIT    500m / 2
//	KUBERNETES_MEMORY_REQUEST/LIMIT 1Gi / 4Gi
//	KUBERNETES_IMAGE_PULL_POLICY    IfNotPresent  (Always, Never)
//	KUBERNETES_SANDBOX_API          (none)        agent-sandbox: computers are agent-sandbox Sandboxes
//	KUBERNETES_SANDBOX_TEMPLATE     open-bot-computer  the SandboxTemplate they are made from
//	KUBERNETES_SANDBOX_WARM_POOL    0             agent-sandbox mode: a SandboxWarmPool of N; computers are SandboxClaims on it
//	KUBERNETES_WORKER_LABELS        app.kubernetes.io/name=open-bot-worker  the worker's pods: the only ones a computer's NetworkPolicy admits
//	WORKER_IMAGE                    open-bot/computer:dev
func kubernetesFromEnv(getenv func(string) string, wanted bool, env []string, log *zerolog.Logger) (*Kubernetes, error) {
	str := func(k, def string) string {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
		return def
	}
	ns := str("KUBERNETES_NAMESPACE", "")
	if ns == "" && !wanted {
		return nil, nil
	}
	var cfg *rest.Config
	var err error
	if kc := str("KUBECONFIG", ""); kc != "" {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kc}
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("KUBECONFIG: %w", err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("kubernetes provider: set KUBECONFIG, or run the worker in the cluster: %w", err)
	}
	qty := func(k, def string) (resource.Quantity, error) {
		v := str(k, def)
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() <= 0 {
			return q, fmt.Errorf("%s: want a positive quantity (e.g. %s), got %q", k, def, v)
		}
		return q, nil
	}
	o := KubernetesOptions{Config: cfg, Namespace: str("KUBERNETES_NAMESPACE", "open-bot"),
		Image: str("WORKER_IMAGE", DefaultImage), StorageClass: str("KUBERNETES_STORAGE_CLASS", ""),
		Connect: str("KUBERNETES_CONNECT", KubeConnectPortForward), Env: env, Log: log,
		SandboxAPI: str("KUBERNETES_SANDBOX_API", ""), SandboxTemplate: str("KUBERNETES_SANDBOX_TEMPLATE", DefaultSandboxTemplate),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}}
	if v := str("KUBERNETES_WORKER_LABELS", ""); v != "" {
		sel, err := labels.ConvertSelectorToLabelsMap(v)
		if err != nil {
			return nil, fmt.Errorf("KUBERNETES_WORKER_LABELS: want key=value pairs separated by commas: %w", err)
		}
		o.WorkerSelector = sel
	}
	switch p := corev1.PullPolicy(str("KUBERNETES_IMAGE_PULL_POLICY", string(corev1.PullIfNotPresent))); p {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		o.PullPolicy = p
	default:
		return nil, fmt.Errorf("KUBERNETES_IMAGE_PULL_POLICY: want Always, IfNotPresent or Never, got %q", p)
	}
	if v := str("KUBERNETES_SANDBOX_WARM_POOL", "0"); v != "0" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxSandboxWarmPool {
			return nil, fmt.Errorf("KUBERNETES_SANDBOX_WARM_POOL: want 0 to %d ready sandboxes, got %q", MaxSandboxWarmPool, v)
		}
		o.SandboxWarmPool = n
	}
	if o.HomeSize, err = qty("KUBERNETES_HOME_SIZE", "10Gi"); err != nil {
		return nil, err
	}
	for _, r := range []struct {
		env, def string
		list     corev1.ResourceList
		name     corev1.ResourceName
	}{
		{"KUBERNETES_CPU_REQUEST", "500m", o.Resources.Requests, corev1.ResourceCPU},
		{"KUBERNETES_CPU_LIMIT", "2", o.Resources.Limits, corev1.ResourceCPU},
		{"KUBERNETES_MEMORY_REQUEST", "1Gi", o.Resources.Requests, corev1.ResourceMemory},
		{"KUBERNETES_MEMORY_LIMIT", "4Gi", o.Resources.Limits, corev1.ResourceMemory},
	} {
		q, err := qty(r.env, r.def)
		if err != nil {
			return nil, err
		}
		r.list[r.name] = q
	}
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := o.Resources.Requests[n], o.Resources.Limits[n]
		if req.Cmp(lim) > 0 {
			return nil, fmt.Errorf("kubernetes provider: the %s request is above its limit", n)
		}
	}
	return NewKubernetes(o)
}
