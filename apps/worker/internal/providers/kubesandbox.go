package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/apps/worker/internal/providers/agentsandbox"
	"github.com/open-bot/computer/pkg/shared/client"
)

// KubeSandboxAPIAgentSandbox (KUBERNETES_SANDBOX_API=agent-sandbox): a
// computer is an agent-sandbox Sandbox (agents.x-k8s.io/v1beta1) made from
// a SandboxTemplate, whose controller makes its pod, home claim and
// Service; stop is operatingMode Suspended, resume Running.
const KubeSandboxAPIAgentSandbox = "agent-sandbox"

// DefaultSandboxTemplate is the SandboxTemplate computers are made from
// when KUBERNETES_SANDBOX_TEMPLATE is unset.
const DefaultSandboxTemplate = "open-bot-computer"

// sandboxHome is the Sandbox's volumeClaimTemplate (and pod volume) of
// the home.
const sandboxHome = "home"

func (k *Kubernetes) sandboxMode() bool { return k.o.SandboxAPI == KubeSandboxAPIAgentSandbox }

// toMap turns a typed object into the JSON map the API gets.
func toMap(v any) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(v)
}

// create sends obj (checked against agent-sandbox's published schema
// first) to gvr in the namespace.
func (k *Kubernetes) createCR(ctx context.Context, what string, obj map[string]any) error {
	if err := agentsandbox.Validate(obj); err != nil {
		return fmt.Errorf("kubernetes provider: %w", err)
	}
	gvr := agentsandbox.Sandboxes
	switch obj["kind"] {
	case "SandboxTemplate":
		gvr = agentsandbox.SandboxTemplates
	case "SandboxClaim":
		gvr = agentsandbox.SandboxClaims
	case "SandboxWarmPool":
		gvr = agentsandbox.SandboxWarmPools
	}
	return k.call(ctx, what, func(ctx context.Context) error {
		_, err := k.dyn.Resource(gvr).Namespace(k.o.Namespace).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		return err
	})
}

// templatePod is the pod spec of the SandboxTemplate computers are made
// from, made from this provider's own pod (without a computer's secrets
// and home) when the template is missing: an operator edits it to add a
// runtime class, node selectors or resources.
func (k *Kubernetes) templatePod(ctx context.Context) (corev1.PodTemplateSpec, error) {
	var tpl corev1.PodTemplateSpec
	var u *unstructured.Unstructured
	err := k.call(ctx, "get sandbox template", func(ctx context.Context) error {
		var err error
		u, err = k.dyn.Resource(agentsandbox.SandboxTemplates).Namespace(k.o.Namespace).Get(ctx, k.o.SandboxTemplate, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		base := k.pod(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}, "template")
		c := base.Spec.Containers[0]
		spec := base.Spec
		spec.Volumes = nil
		spec.Containers = []corev1.Container{{Name: c.Name, Image: c.Image, ImagePullPolicy: c.ImagePullPolicy, Resources: c.Resources, SecurityContext: c.SecurityContext}}
		pt, err := toMap(&corev1.PodTemplateSpec{Spec: spec})
		if err != nil {
			return tpl, err
		}
		delete(pt, "metadata")
		obj := map[string]any{"apiVersion": agentsandbox.APIVersionExtends, "kind": "SandboxTemplate",
			"metadata": map[string]any{"name": k.o.SandboxTemplate, "namespace": k.o.Namespace,
				"labels": map[string]any{kubeManagedBy: kubeManagedByValue}},
			"spec": map[string]any{"podTemplate": pt}}
		if err := k.createCR(ctx, "create sandbox template", obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return tpl, k.notReady(err)
		}
		k.log.Info().Str("template", k.o.SandboxTemplate).Msg("sandbox template created")
		return corev1.PodTemplateSpec{Spec: spec}, nil
	}
	if err != nil {
		return tpl, k.notReady(err)
	}
	raw, ok, _ := unstructured.NestedMap(u.Object, "spec", "podTemplate")
	if !ok {
		return tpl, fmt.Errorf("kubernetes provider: sandbox template %s has no podTemplate", k.o.SandboxTemplate)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tpl); err != nil {
		return tpl, fmt.Errorf("kubernetes provider: sandbox template %s: %w", k.o.SandboxTemplate, err)
	}
	return tpl, nil
}

// sandbox is computer ref's Sandbox: the template's pod with this
// computer's container settings (env, mounts, ports), its secrets and
// shared memory as volumes, and its home as a volumeClaimTemplate.
func (k *Kubernetes) sandbox(s *corev1.Secret, ref string, tpl corev1.PodTemplateSpec) (map[string]any, error) {
	own := k.pod(s, ref)
	pod := tpl.Spec.DeepCopy()
	mine := own.Spec.Containers[0]
	i := -1
	for j, c := range pod.Containers {
		if c.Name == mine.Name {
			i = j
		}
	}
	if i < 0 {
		if len(pod.Containers) != 1 {
			return nil, fmt.Errorf("kubernetes provider: sandbox template %s has no container named %q", k.o.SandboxTemplate, mine.Name)
		}
		i = 0
	}
	c := &pod.Containers[i]
	if c.Image == "" {
		c.Image, c.ImagePullPolicy = mine.Image, mine.ImagePullPolicy
	}
	c.Env = append(c.Env, mine.Env...)
	c.VolumeMounts = append(c.VolumeMounts, mine.VolumeMounts...)
	c.Ports = mine.Ports
	if c.SecurityContext == nil {
		c.SecurityContext = mine.SecurityContext
	}
	// Whatever the template says: no API credentials, no service list.
	pod.AutomountServiceAccountToken = own.Spec.AutomountServiceAccountToken
	pod.EnableServiceLinks = own.Spec.EnableServiceLinks
	if pod.TerminationGracePeriodSeconds == nil {
		pod.TerminationGracePeriodSeconds = own.Spec.TerminationGracePeriodSeconds
	}
	if pod.SecurityContext == nil {
		pod.SecurityContext = own.Spec.SecurityContext
	}
	pod.Hostname = own.Spec.Hostname
	for _, v := range own.Spec.Volumes {
		if v.Name != "home" { // the home is the volumeClaimTemplate of that name
			pod.Volumes = append(pod.Volumes, v)
		}
	}
	labels := map[string]string{}
	for k, v := range tpl.Labels {
		labels[k] = v
	}
	for k, v := range own.Labels {
		labels[k] = v
	}
	pt, err := toMap(&corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: own.Annotations}, Spec: *pod})
	if err != nil {
		return nil, err
	}
	claim := corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: k.o.HomeSize}},
	}
	if k.o.StorageClass != "" {
		sc := k.o.StorageClass
		claim.StorageClassName = &sc
	}
	cs, err := toMap(&claim)
	if err != nil {
		return nil, err
	}
	meta := own.ObjectMeta
	return map[string]any{
		"apiVersion": agentsandbox.APIVersionAgents, "kind": "Sandbox",
		"metadata": map[string]any{"name": ref, "namespace": k.o.Namespace, "labels": stringMap(meta.Labels), "annotations": stringMap(meta.Annotations)},
		"spec": map[string]any{
			"podTemplate": pt,
			"volumeClaimTemplates": []any{map[string]any{
				"metadata": map[string]any{"name": sandboxHome, "labels": stringMap(meta.Labels)},
				"spec":     cs,
			}},
			"service":        true,
			"shutdownPolicy": "Retain",
			"operatingMode":  "Running",
		},
	}, nil
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// provisionSandbox is Provision in agent-sandbox mode: the Secret (the
// incarnation's anchor, as in the plain mode) and the Sandbox.
func (k *Kubernetes) provisionSandbox(ctx context.Context, s *corev1.Secret, ref string) error {
	tpl, err := k.templatePod(ctx)
	if err != nil {
		return err
	}
	obj, err := k.sandbox(s, ref, tpl)
	if err != nil {
		return err
	}
	return k.createCR(ctx, "create sandbox", obj)
}

// sandboxStatus is what the provider reads of a Sandbox.
type sandboxStatus struct {
	mode       string
	conditions []metav1.Condition
	selector   string
	fqdn       string
}

func (s sandboxStatus) cond(t string) *metav1.Condition {
	for i := range s.conditions {
		if s.conditions[i].Type == t {
			return &s.conditions[i]
		}
	}
	return nil
}

func (k *Kubernetes) getSandbox(ctx context.Context, ref string) (sandboxStatus, error) {
	var u *unstructured.Unstructured
	err := k.call(ctx, "get sandbox", func(ctx context.Context) error {
		var err error
		u, err = k.dyn.Resource(agentsandbox.Sandboxes).Namespace(k.o.Namespace).Get(ctx, ref, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return sandboxStatus{}, ErrGone
	}
	if err != nil {
		return sandboxStatus{}, err
	}
	var st sandboxStatus
	st.mode, _, _ = unstructured.NestedString(u.Object, "spec", "operatingMode")
	st.selector, _, _ = unstructured.NestedString(u.Object, "status", "selector")
	st.fqdn, _, _ = unstructured.NestedString(u.Object, "status", "serviceFQDN")
	if raw, ok, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); ok {
		b, _ := json.Marshal(raw)
		_ = json.Unmarshal(b, &st.conditions)
	}
	return st, nil
}

func (k *Kubernetes) setMode(ctx context.Context, ref, mode string) error {
	patch := []byte(`{"spec":{"operatingMode":"` + mode + `"}}`)
	return k.call(ctx, "set the sandbox's operatingMode", func(ctx context.Context) error {
		_, err := k.dyn.Resource(agentsandbox.Sandboxes).Namespace(k.o.Namespace).Patch(ctx, ref, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// waitSandbox polls ref's Sandbox until done says so, until deadline.
func (k *Kubernetes) waitSandbox(ctx context.Context, ref string, deadline time.Time, what string, done func(sandboxStatus) bool) (sandboxStatus, error) {
	for {
		st, err := k.getSandbox(ctx, ref)
		if err != nil {
			return st, err
		}
		if done(st) {
			return st, nil
		}
		if time.Now().After(deadline) {
			why := "no controller has written its status (is agent-sandbox's controller installed in the cluster?)"
			if c := st.cond("Ready"); c != nil {
				why = fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
			}
			return st, fmt.Errorf("kubernetes provider: sandbox %s not %s after %s: %s", ref, what, k.o.ReadyTimeout, why)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// reconnectSandbox is Reconnect in agent-sandbox mode: a suspended
// Sandbox is set Running; once its Ready condition is True, botd is
// reached on its pod (status.selector) or at status.serviceFQDN.
func (k *Kubernetes) reconnectSandbox(ctx context.Context, s *corev1.Secret, ref, token string) (Machine, error) {
	deadline := time.Now().Add(k.o.ReadyTimeout)
	name, err := k.sandboxOf(ctx, s, ref, deadline)
	if err != nil {
		return nil, err
	}
	st, err := k.getSandbox(ctx, name)
	if err != nil {
		return nil, err
	}
	if st.mode == "Suspended" {
		if err := k.setMode(ctx, name, "Running"); err != nil {
			return nil, err
		}
	}
	st, err = k.waitSandbox(ctx, name, deadline, "ready", func(st sandboxStatus) bool {
		c := st.cond("Ready")
		return c != nil && c.Status == metav1.ConditionTrue && st.mode != "Suspended"
	})
	if err != nil {
		return nil, err
	}
	var c *client.Client
	if k.o.Connect == KubeConnectService {
		if st.fqdn == "" {
			return nil, fmt.Errorf("kubernetes provider: sandbox %s is ready but has no serviceFQDN", name)
		}
		c = client.New(fmt.Sprintf("http://%s:%d", st.fqdn, containerAPIPort), token, nil)
	} else {
		pod, err := k.sandboxPod(ctx, name, st.selector)
		if err != nil {
			return nil, err
		}
		d := k.dialerFor(ref, pod)
		tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}
		c = client.New("http://botd", token, &http.Client{Transport: tr})
	}
	if s.Annotations[kubeAnnotWarmPool] != "" {
		// A pooled Sandbox's botd starts on the pool's token: it takes
		// the computer's now (and again after a restart).
		pool, err := k.poolSecret(ctx)
		if err != nil {
			return nil, fmt.Errorf("kubernetes provider: the warm pool's secret: %w", err)
		}
		adopted, err := adoptToken(ctx, c, strings.TrimSpace(string(pool.Data["botd_token"])), deadline)
		if err != nil {
			return nil, fmt.Errorf("kubernetes provider: sandbox %s of claim %s: %w", name, ref, err)
		}
		if adopted {
			k.log.Info().Str("ref", ref).Str("sandbox", name).Msg("the claimed sandbox's botd took the computer's token")
		}
	}
	m := machines.BotdOf(c)
	if err := awaitHealthy(ctx, m, time.Until(deadline), nil); err != nil {
		return nil, fmt.Errorf("kubernetes provider: sandbox %s: %w", name, err)
	}
	return m, nil
}

// sandboxPod is the running pod of a Sandbox, found by its status.selector.
func (k *Kubernetes) sandboxPod(ctx context.Context, ref, selector string) (string, error) {
	if selector == "" {
		return "", fmt.Errorf("kubernetes provider: sandbox %s is ready but its status has no selector", ref)
	}
	var pods *corev1.PodList
	if err := k.call(ctx, "list the sandbox's pods", func(ctx context.Context) error {
		var err error
		pods, err = k.cs.CoreV1().Pods(k.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		return err
	}); err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("kubernetes provider: sandbox %s is ready but no running pod matches %q", ref, selector)
}

// stopSandbox sets the Sandbox Suspended and waits for its controller to
// say so (condition Suspended True, or Ready no longer True).
func (k *Kubernetes) stopSandbox(ctx context.Context, ref string) error {
	if err := k.setMode(ctx, ref, "Suspended"); err != nil {
		if apierrors.IsNotFound(err) {
			return ErrGone
		}
		return err
	}
	_, err := k.waitSandbox(ctx, ref, time.Now().Add(k.o.ReadyTimeout), "suspended", func(st sandboxStatus) bool {
		if c := st.cond("Suspended"); c != nil {
			return c.Status == metav1.ConditionTrue
		}
		c := st.cond("Ready")
		return c != nil && c.Status != metav1.ConditionTrue
	})
	return err
}

// destroySandbox deletes the Sandbox (its controller deletes its pod and
// Service) and the home claims it made (by label); with a warm pool, the
// SandboxClaim and the Sandbox it was bound to.
func (k *Kubernetes) destroySandbox(ctx context.Context, ref string) error {
	var errs []error
	if k.warmPoolMode() {
		bound, err := k.boundSandbox(ctx, ref)
		if err != nil && !errors.Is(err, ErrGone) && !isNoCRD(err) {
			errs = append(errs, err)
		}
		if err := k.call(ctx, "delete sandbox claim", func(ctx context.Context) error {
			return k.dyn.Resource(agentsandbox.SandboxClaims).Namespace(k.o.Namespace).Delete(ctx, ref, metav1.DeleteOptions{})
		}); err != nil && !apierrors.IsNotFound(err) && !isNoCRD(err) {
			errs = append(errs, err)
		}
		if bound != "" {
			if err := k.call(ctx, "delete the claimed sandbox", func(ctx context.Context) error {
				return k.dyn.Resource(agentsandbox.Sandboxes).Namespace(k.o.Namespace).Delete(ctx, bound, metav1.DeleteOptions{})
			}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	if err := k.call(ctx, "delete sandbox", func(ctx context.Context) error {
		return k.dyn.Resource(agentsandbox.Sandboxes).Namespace(k.o.Namespace).Delete(ctx, ref, metav1.DeleteOptions{})
	}); err != nil && !apierrors.IsNotFound(err) && !isNoCRD(err) {
		errs = append(errs, err)
	}
	var claims *corev1.PersistentVolumeClaimList
	if err := k.call(ctx, "list home claims", func(ctx context.Context) error {
		var err error
		claims, err = k.cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kubeLabelMachine + "=" + ref})
		return err
	}); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, c := range claims.Items {
		if err := k.call(ctx, "delete home claim", func(ctx context.Context) error {
			return k.cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{})
		}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// isNoCRD: the API server does not serve the resource (the CRDs are not
// installed).
func isNoCRD(err error) bool {
	return err != nil && strings.Contains(err.Error(), "the server could not find the requested resource")
}
