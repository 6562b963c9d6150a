package providers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/open-bot/computer/apps/worker/internal/providers/agentsandbox"
)

// TestKubernetesPodSpec: the pod a computer runs as carries its secrets
// only as root-only files (never in env), gets no API credentials, no
// service links and no privileged mode, and has its home on its claim.
func TestKubernetesPodSpec(t *testing.T) {
	k, err := NewKubernetes(KubernetesOptions{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "ns",
		Env: []string{"MODEL_API_KEY=sk-secret-value", "MODEL_UPSTREAM_URL=http://10.0.0.1:9", "BOTD_TOKEN=nope"}})
	require.NoError(t, err)
	ref := kubeMachineName("alice_team-")
	require.Regexp(t, kubeRef, ref)
	require.LessOrEqual(t, len(homeClaim(ref)), 63)
	s := &corev1.Secret{ObjectMeta: k.meta(ref, "alice_team-", ref), Data: map[string][]byte{"botd_token": []byte("t0123456789abcdef"), "model_api_key": []byte("sk-secret-value")}}
	p := k.pod(s, ref)
	require.Equal(t, "alice_team", p.Labels[kubeLabelComputer], "a label value ends with a letter or digit")
	require.Equal(t, "alice_team-", p.Annotations[kubeAnnotComputer])
	require.False(t, *p.Spec.AutomountServiceAccountToken)
	require.False(t, *p.Spec.EnableServiceLinks)
	require.False(t, p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC)
	c := p.Spec.Containers[0]
	require.False(t, *c.SecurityContext.Privileged)
	env := map[string]string{}
	for _, e := range c.Env {
		require.Nil(t, e.ValueFrom)
		env[e.Name] = e.Value
		require.NotContains(t, e.Value, "sk-secret-value", "no secret in the environment")
		require.NotContains(t, e.Value, "t0123456789abcdef", "no token in the environment")
	}
	require.Equal(t, containerTokenPath, env["BOTD_TOKEN_FILE"])
	require.Equal(t, containerModelKeyPath, env["MODEL_API_KEY_FILE"])
	require.Equal(t, "http://10.0.0.1:9", env["MODEL_UPSTREAM_URL"])
	_, hasKey := env["MODEL_API_KEY"]
	require.False(t, hasKey)
	_, hasToken := env["BOTD_TOKEN"]
	require.False(t, hasToken)
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	require.Equal(t, "home", mounts["/home"].Name)
	for _, f := range []string{containerTokenPath, containerModelKeyPath} {
		require.Equal(t, "secrets", mounts[f].Name)
		require.Equal(t, filepath.Base(f), mounts[f].SubPath, "a file of its own, not a link into the volume")
		require.True(t, mounts[f].ReadOnly)
	}
	for _, v := range p.Spec.Volumes {
		switch v.Name {
		case "home":
			require.Equal(t, homeClaim(ref), v.PersistentVolumeClaim.ClaimName)
		case "secrets":
			require.Equal(t, ref, v.Secret.SecretName)
			require.Equal(t, int32(0o400), *v.Secret.DefaultMode, "root-only: the bot and desktop users cannot read them")
		}
	}
}

// TestKubernetesFromEnv: off unless asked for; settings are checked.
func TestKubernetesFromEnv(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600))
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	k, err := kubernetesFromEnv(env(map[string]string{"KUBECONFIG": kc}), false, nil, nil)
	require.NoError(t, err)
	require.Nil(t, k, "not configured: no kubernetes kind")
	k, err = kubernetesFromEnv(env(map[string]string{"KUBECONFIG": kc}), true, nil, nil)
	require.NoError(t, err)
	require.Equal(t, "open-bot", k.o.Namespace)
	require.Equal(t, KubeConnectPortForward, k.o.Connect)
	for bad, why := range map[string]string{
		"KUBERNETES_HOME_SIZE":         "positive quantity",
		"KUBERNETES_IMAGE_PULL_POLICY": "want Always",
		"KUBERNETES_CONNECT":           "want port-forward",
		"KUBERNETES_NAMESPACE":         "not a DNS label",
		"KUBERNETES_SANDBOX_API":       "want agent-sandbox",
		"KUBERNETES_SANDBOX_TEMPLATE":  "not a DNS label",
		"KUBERNETES_WORKER_LABELS":     "want key=value pairs",
		"KUBERNETES_SANDBOX_WARM_POOL": "want 0 to 64",
	} {
		_, err := kubernetesFromEnv(env(map[string]string{"KUBECONFIG": kc, bad: "Bad_Value"}), true, nil, nil)
		require.ErrorContains(t, err, why, bad)
	}
	_, err = kubernetesFromEnv(env(map[string]string{"KUBECONFIG": kc, "KUBERNETES_SANDBOX_WARM_POOL": "65", "KUBERNETES_SANDBOX_API": "agent-sandbox"}), true, nil, nil)
	require.ErrorContains(t, err, "want 0 to 64")
	_, err = kubernetesFromEnv(env(map[string]string{"KUBECONFIG": kc, "KUBERNETES_SANDBOX_WARM_POOL": "3"}), true, nil, nil)
	require.ErrorContains(t, err, "needs KUBERNETES_SANDBOX_API=agent-sandbox")
	k, err = kubernetesFromEnv(env(map[string]string{"KUBECONFIG": kc, "KUBERNETES_SANDBOX_WARM_POOL": "3", "KUBERNETES_SANDBOX_API": "agent-sandbox"}), true, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 3, k.o.SandboxWarmPool)
	require.True(t, k.warmPoolMode())
	_, err = kubernetesFromEnv(env(map[string]string{"KUBECONFIG": kc, "KUBERNETES_CPU_REQUEST": "3"}), true, nil, nil)
	require.ErrorContains(t, err, "request is above its limit")
	_, err = kubernetesFromEnv(env(map[string]string{"KUBECONFIG": filepath.Join(t.TempDir(), "none")}), true, nil, nil)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "KUBECONFIG"), err.Error())
}

// TestKubernetesSandboxObject: in agent-sandbox mode the Sandbox made
// from a template (an operator's, with a runtime class and a node
// selector) keeps the template's pod settings, adds the computer's
// container settings, secrets and home claim, forces off API credentials,
// and matches agent-sandbox's published schema.
func TestKubernetesSandboxObject(t *testing.T) {
	k, err := NewKubernetes(KubernetesOptions{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "ns",
		SandboxAPI: KubeSandboxAPIAgentSandbox, Env: []string{"MODEL_API_KEY=sk-secret-value"}})
	require.NoError(t, err)
	ref := kubeMachineName("bob")
	s := &corev1.Secret{ObjectMeta: k.meta(ref, "bob", ref), Data: map[string][]byte{"botd_token": []byte("t0123456789abcdef"), "model_api_key": []byte("sk-secret-value")}}
	gvisor, yes := "gvisor", true
	tpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RuntimeClassName: &gvisor, NodeSelector: map[string]string{"pool": "computers"},
		AutomountServiceAccountToken: &yes,
		Containers:                   []corev1.Container{{Name: "computer", Image: "registry.example/computer:1"}},
	}}
	obj, err := k.sandbox(s, ref, tpl)
	require.NoError(t, err)
	require.NoError(t, agentsandbox.Validate(obj), "the Sandbox matches the published schema")
	raw, err := json.Marshal(obj)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "sk-secret-value")
	require.NotContains(t, string(raw), "t0123456789abcdef")
	var sb struct {
		Spec struct {
			PodTemplate          corev1.PodTemplateSpec `json:"podTemplate"`
			VolumeClaimTemplates []struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			} `json:"volumeClaimTemplates"`
			OperatingMode string `json:"operatingMode"`
		} `json:"spec"`
	}
	require.NoError(t, json.Unmarshal(raw, &sb))
	ps := sb.Spec.PodTemplate.Spec
	require.Equal(t, "gvisor", *ps.RuntimeClassName)
	require.Equal(t, "computers", ps.NodeSelector["pool"])
	require.False(t, *ps.AutomountServiceAccountToken, "the template cannot give the bot API credentials")
	require.Equal(t, "registry.example/computer:1", ps.Containers[0].Image)
	require.Equal(t, "Running", sb.Spec.OperatingMode)
	require.Len(t, sb.Spec.VolumeClaimTemplates, 1)
	require.Equal(t, sandboxHome, sb.Spec.VolumeClaimTemplates[0].Metadata.Name)
	var mounts []string
	for _, m := range ps.Containers[0].VolumeMounts {
		mounts = append(mounts, m.Name+":"+m.MountPath)
	}
	require.Contains(t, mounts, "home:/home")
	require.Contains(t, mounts, "secrets:"+containerTokenPath)
	for _, v := range ps.Volumes {
		require.NotEqual(t, "home", v.Name, "the home is the volumeClaimTemplate, not a pod volume")
	}
	require.Equal(t, ref, sb.Spec.PodTemplate.Labels[kubeLabelMachine])
}
