package providers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// KindKubernetes is computers on a Kubernetes cluster.
const KindKubernetes = "kubernetes"

// Labels and annotations of the kubernetes provider's resources.
const (
	kubeManagedBy      = "app.kubernetes.io/managed-by"
	kubeManagedByValue = "open-bot-worker"
	// kubeLabelComputer is the computer id as a label value (selectable);
	// kubeAnnotComputer is the exact id.
	kubeLabelComputer = "dev.open-bot/computer"
	kubeAnnotComputer = "dev.open-bot/computer-id"
	kubeLabelMachine  = "dev.open-bot/machine"
	// kubeLabelKeptHome marks a home claim a destroy with keepHome left
	// (its machine label still names the destroyed machine's ref);
	// kubeAnnotHomeClaim, on a computer's Secret, names the kept claim its
	// machine took over instead of making its own.
	kubeLabelKeptHome  = "dev.open-bot/kept-home"
	kubeAnnotHomeClaim = "dev.open-bot/home-claim"
)

// Ways the worker reaches a pod's botd.
const (
	// KubeConnectPortForward: the API server's portforward subresource,
	// dialed by the worker's own process (nothing exposed, nothing
	// listening on the worker's host). The default.
	KubeConnectPortForward = "port-forward"
	// KubeConnectService: the computer's Service by its cluster DNS name,
	// for a worker that runs inside the cluster.
	KubeConnectService = "service"
)

// KubernetesOptions configures the kubernetes provider.
type KubernetesOptions struct {
	// Config reaches the API server (KUBECONFIG, else the pod's service
	// account when the worker runs in the cluster).
	Config *rest.Config
	// Namespace holds every computer's resources (KUBERNETES_NAMESPACE,
	// default open-bot). It must exist: the worker needs a Role in it,
	// never a cluster-wide grant.
	Namespace string
	// Image is the computer image (WORKER_IMAGE); PullPolicy its
	// imagePullPolicy (KUBERNETES_IMAGE_PULL_POLICY, default IfNotPresent).
	Image      string
	PullPolicy corev1.PullPolicy
	// StorageClass is the home PVC's class ("" is the cluster's default);
	// HomeSize its request (KUBERNETES_HOME_SIZE, default 10Gi).
	StorageClass string
	HomeSize     resource.Quantity
	// Requests and limits of each computer's container (KUBERNETES_CPU_REQUEST
	// 500m, KUBERNETES_CPU_LIMIT 2, KUBERNETES_MEMORY_REQUEST 1Gi,
	// KUBERNETES_MEMORY_LIMIT 4Gi).
	Resources corev1.ResourceRequirements
	// MaxScreens is botd's MAX_SCREENS (default 4).
	MaxScreens int
	// Env is extra environment for botd (never BOTD_TOKEN; MODEL_API_KEY
	// goes into the computer's Secret, mounted root-only).
	Env []string
	// Connect is KubeConnectPortForward (default) or KubeConnectService.
	Connect string
	// SandboxAPI is "" (plain resources) or KubeSandboxAPIAgentSandbox
	// (KUBERNETES_SANDBOX_API): computers are agent-sandbox Sandboxes made
	// from the SandboxTemplate SandboxTemplate (KUBERNETES_SANDBOX_TEMPLATE,
	// default open-bot-computer; made from this provider's pod when
	// missing), run by agent-sandbox's controller.
	SandboxAPI      string
	SandboxTemplate string
	// SandboxWarmPool (KUBERNETES_SANDBOX_WARM_POOL, agent-sandbox mode
	// only) is how many ready Sandboxes a SandboxWarmPool keeps; a computer
	// is then a SandboxClaim on it (kubewarmpool.go). 0: none.
	SandboxWarmPool int
	// ReadyTimeout bounds the wait for a pod to run and its botd to answer
	// (default 180 s: a cold node pulls or unpacks the image).
	ReadyTimeout time.Duration
	// CallTimeout bounds each API call (default 30 s).
	CallTimeout time.Duration
	// WorkerSelector are the labels of the worker's own pods (a worker in
	// the cluster): the only pods each computer's NetworkPolicy lets reach
	// its port 7000 (KUBERNETES_WORKER_LABELS, default
	// app.kubernetes.io/name=open-bot-worker).
	WorkerSelector map[string]string
	// Log is the provider's logger (nop when nil).
	Log *zerolog.Logger
}

// Kubernetes is the kubernetes provider. A computer is plain resources in
// one namespace, named after its incarnation (its ref, "ob-…"):
//
//   - a Secret (botd's token, the model key): the incarnation's anchor,
//     mounted read-only, mode 0400, root's, at /run/secrets;
//   - a PersistentVolumeClaim <ref>-home mounted at /home;
//   - a Service <ref> (port 7000) for a worker inside the cluster, and a
//     NetworkPolicy <ref> that lets only the worker's pods reach it;
//   - a Pod <ref> of the computer image, made by Reconnect whenever it is
//     missing. A Pod and not a one-replica StatefulSet: the worker is the
//     controller (it stops a computer by deleting its pod, keeps the
//     claim, and makes the pod again on resume or when it was lost
//     behind its back); a StatefulSet would be a second controller
//     fighting it over the same pod.
type Kubernetes struct {
	o   KubernetesOptions
	cs  kubernetes.Interface
	dyn dynamic.Interface
	log zerolog.Logger

	mu      sync.Mutex
	dialers map[string]*podDialer

	// poolMu guards poolReady: the warm pool's objects are made.
	poolMu    sync.Mutex
	poolReady bool
}

// NewKubernetes returns the kubernetes provider. It does not call the API
// server.
func NewKubernetes(o KubernetesOptions) (*Kubernetes, error) {
	if o.Config == nil {
		return nil, errors.New("kubernetes provider: no cluster configuration (KUBECONFIG, or run in the cluster)")
	}
	if o.Namespace == "" {
		o.Namespace = "open-bot"
	}
	if !kubeDNSLabel.MatchString(o.Namespace) {
		return nil, fmt.Errorf("kubernetes provider: namespace %q is not a DNS label", o.Namespace)
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.PullPolicy == "" {
		o.PullPolicy = corev1.PullIfNotPresent
	}
	if o.HomeSize.IsZero() {
		o.HomeSize = resource.MustParse("10Gi")
	}
	if o.MaxScreens <= 0 {
		o.MaxScreens = 4
	}
	switch o.Connect {
	case "":
		o.Connect = KubeConnectPortForward
	case KubeConnectPortForward, KubeConnectService:
	default:
		return nil, fmt.Errorf("kubernetes provider: connect %q: want %s or %s", o.Connect, KubeConnectPortForward, KubeConnectService)
	}
	switch o.SandboxAPI {
	case "", KubeSandboxAPIAgentSandbox:
	default:
		return nil, fmt.Errorf("kubernetes provider: sandbox API %q: want %s or nothing (plain resources)", o.SandboxAPI, KubeSandboxAPIAgentSandbox)
	}
	if o.SandboxTemplate == "" {
		o.SandboxTemplate = DefaultSandboxTemplate
	}
	switch {
	case o.SandboxWarmPool < 0 || o.SandboxWarmPool > MaxSandboxWarmPool:
		return nil, fmt.Errorf("kubernetes provider: sandbox warm pool %d: want 0 to %d", o.SandboxWarmPool, MaxSandboxWarmPool)
	case o.SandboxWarmPool > 0 && o.SandboxAPI != KubeSandboxAPIAgentSandbox:
		return nil, fmt.Errorf("kubernetes provider: a sandbox warm pool needs KUBERNETES_SANDBOX_API=%s (the plain mode's pool is WORKER_POOL=kubernetes=N)", KubeSandboxAPIAgentSandbox)
	}
	if !kubeDNSLabel.MatchString(o.SandboxTemplate) {
		return nil, fmt.Errorf("kubernetes provider: sandbox template %q is not a DNS label", o.SandboxTemplate)
	}
	if len(o.WorkerSelector) == 0 {
		o.WorkerSelector = map[string]string{"app.kubernetes.io/name": "open-bot-worker"}
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 180 * time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 30 * time.Second
	}
	cfg := rest.CopyConfig(o.Config)
	cfg.UserAgent = "open-bot-worker"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes provider: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes provider: %w", err)
	}
	o.Config = cfg
	k := &Kubernetes{o: o, cs: cs, dyn: dyn, log: zerolog.Nop(), dialers: map[string]*podDialer{}}
	if o.Log != nil {
		k.log = o.Log.With().Str("component", "provider_kubernetes").Logger()
	}
	return k, nil
}

var (
	kubeDNSLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	// kubeRef is what this provider's refs look like (Service names are
	// DNS-1035 labels: a letter first).
	kubeRef = regexp.MustCompile(`^ob-[a-z0-9-]{1,52}[a-z0-9]$`)
)

// kubeMachineName is a fresh incarnation name for computerID.
func kubeMachineName(computerID string) string {
	base := strings.ReplaceAll(computerID, "_", "-")
	if len(base) > 40 {
		base = base[:40]
	}
	base = strings.TrimRight(base, "-")
	var b [4]byte
	_, _ = rand.Read(b[:])
	if base == "" {
		return "ob-" + hex.EncodeToString(b[:])
	}
	return "ob-" + base + "-" + hex.EncodeToString(b[:])
}

// kubeLabelValue is computerID as a label value (which must end with a
// letter or digit); the exact id is the annotation.
func kubeLabelValue(computerID string) string {
	return strings.TrimRight(computerID, "-_")
}

func homeClaim(ref string) string { return ref + "-home" }

// claimOf is the home claim of the computer whose Secret is s: the kept
// one it took over, or its own.
func claimOf(s *corev1.Secret, ref string) string {
	if c := s.Annotations[kubeAnnotHomeClaim]; c != "" {
		return c
	}
	return homeClaim(ref)
}

// Close ends every port-forward connection.
func (k *Kubernetes) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for ref, d := range k.dialers {
		d.Close()
		delete(k.dialers, ref)
	}
}

// Describe implements Provider.
func (k *Kubernetes) Describe() Description {
	return Description{Kind: KindKubernetes, Capabilities: Capabilities{MultiScreen: true, Stop: true, Persistent: true}}
}

// call bounds one API call and says which it was when it fails.
func (k *Kubernetes) call(ctx context.Context, what string, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, k.o.CallTimeout)
	defer cancel()
	if err := f(ctx); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			return err
		}
		return fmt.Errorf("kubernetes provider: %s: %w", what, err)
	}
	return nil
}

// Ready reports whether the API server answers and the namespace is there.
func (k *Kubernetes) Ready(ctx context.Context) error {
	err := k.call(ctx, "get namespace", func(ctx context.Context) error {
		_, err := k.cs.CoreV1().Namespaces().Get(ctx, k.o.Namespace, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes provider: namespace %s does not exist (create it, and the worker's Role in it: deploy/kubernetes/worker-rbac.yaml)", k.o.Namespace)
	}
	if apierrors.IsForbidden(err) {
		// A Role in the namespace need not grant reading namespaces: a
		// list of our Secrets is what the worker must be able to do.
		err = k.call(ctx, "list secrets", func(ctx context.Context) error {
			_, err := k.cs.CoreV1().Secrets(k.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kubeManagedBy + "=" + kubeManagedByValue, Limit: 1})
			return err
		})
	}
	return err
}

func (k *Kubernetes) labels(computerID, ref string) map[string]string {
	return map[string]string{kubeManagedBy: kubeManagedByValue, kubeLabelComputer: kubeLabelValue(computerID), kubeLabelMachine: ref}
}

func (k *Kubernetes) meta(name, computerID, ref string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: k.o.Namespace, Labels: k.labels(computerID, ref),
		Annotations: map[string]string{kubeAnnotComputer: computerID}}
}

// Provision makes the computer's Secret, home claim and Service; the pod
// is made by Reconnect.
func (k *Kubernetes) Provision(ctx context.Context, spec Spec) (string, error) {
	if err := checkComputerID(spec.ComputerID); err != nil {
		return "", err
	}
	if len(spec.BotdToken) < 16 {
		return "", errors.New("kubernetes provider: botd token must be at least 16 characters")
	}
	if spec.HomeDir != "" {
		return "", errors.New("kubernetes provider: a worker-owned home directory cannot be mounted in a cluster (the home is the computer's claim)")
	}
	ref := kubeMachineName(spec.ComputerID)
	var kept string
	if spec.KeptHome != "" && !k.sandboxMode() {
		var err error
		if kept, err = k.takeKeptHome(ctx, spec.KeptHome, spec.ComputerID, ref); err != nil {
			return "", err
		}
	}
	immutable := true
	sec := &corev1.Secret{ObjectMeta: k.meta(ref, spec.ComputerID, ref), Type: corev1.SecretTypeOpaque, Data: k.secretData(spec.BotdToken), Immutable: &immutable}
	if kept != "" {
		sec.Annotations[kubeAnnotHomeClaim] = kept
	}
	if k.warmPoolMode() {
		sec.Annotations[kubeAnnotWarmPool] = k.poolName()
	}
	undo := func(err error) (string, error) {
		if kept != "" {
			// The kept home goes back to what it was: kept for the
			// restore key's next use.
			k.giveBackKeptHome(context.WithoutCancel(ctx), kept, spec.KeptHome)
		}
		_ = k.Destroy(context.WithoutCancel(ctx), ref)
		return "", err
	}
	if err := k.call(ctx, "create secret", func(ctx context.Context) error {
		_, err := k.cs.CoreV1().Secrets(k.o.Namespace).Create(ctx, sec, metav1.CreateOptions{})
		return err
	}); err != nil {
		if kept != "" {
			return undo(k.notReady(err))
		}
		return "", k.notReady(err)
	}
	if k.warmPoolMode() {
		if err := k.provisionClaim(ctx, sec, ref); err != nil {
			return undo(err)
		}
		k.log.Info().Str("ref", ref).Str("computer", spec.ComputerID).Str("pool", k.poolName()).Msg("claimed a sandbox of the warm pool")
		return ref, nil
	}
	if k.sandboxMode() {
		if err := k.provisionSandbox(ctx, sec, ref); err != nil {
			return undo(err)
		}
		k.log.Info().Str("ref", ref).Str("computer", spec.ComputerID).Msg("provisioned a sandbox")
		return ref, nil
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: k.meta(homeClaim(ref), spec.ComputerID, ref),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: k.o.HomeSize}},
		}}
	if k.o.StorageClass != "" {
		sc := k.o.StorageClass
		pvc.Spec.StorageClassName = &sc
	}
	if kept == "" {
		if err := k.call(ctx, "create home claim", func(ctx context.Context) error {
			_, err := k.cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).Create(ctx, pvc, metav1.CreateOptions{})
			return err
		}); err != nil {
			return undo(err)
		}
	}
	svc := &corev1.Service{ObjectMeta: k.meta(ref, spec.ComputerID, ref),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{kubeLabelMachine: ref},
			Ports:    []corev1.ServicePort{{Name: "botd", Port: containerAPIPort, TargetPort: intstr.FromInt32(containerAPIPort), Protocol: corev1.ProtocolTCP}},
		}}
	if err := k.call(ctx, "create service", func(ctx context.Context) error {
		_, err := k.cs.CoreV1().Services(k.o.Namespace).Create(ctx, svc, metav1.CreateOptions{})
		return err
	}); err != nil {
		return undo(err)
	}
	if err := k.call(ctx, "create network policy", func(ctx context.Context) error {
		_, err := k.cs.NetworkingV1().NetworkPolicies(k.o.Namespace).Create(ctx, k.networkPolicy(spec.ComputerID, ref), metav1.CreateOptions{})
		return err
	}); err != nil {
		return undo(err)
	}
	k.log.Info().Str("ref", ref).Str("computer", spec.ComputerID).Str("kept_home", kept).Msg("provisioned")
	return ref, nil
}

// secretData is what a computer's Secret (or the warm pool's) holds: the
// botd token, and the model key when the worker has one.
func (k *Kubernetes) secretData(token string) map[string][]byte {
	data := map[string][]byte{"botd_token": []byte(token)}
	for _, kv := range k.o.Env {
		if v, ok := strings.CutPrefix(kv, "MODEL_API_KEY="); ok {
			data["model_api_key"] = []byte(v)
		}
	}
	return data
}

// homeClaims lists machine ref's home claims: the ones kept for it (a
// destroy with keepHome) when kept, else its own (or the kept one it took
// over).
func (k *Kubernetes) homeClaims(ctx context.Context, ref string, kept bool) ([]corev1.PersistentVolumeClaim, error) {
	sel := kubeManagedBy + "=" + kubeManagedByValue + "," + kubeLabelMachine + "=" + ref + ","
	if kept {
		sel += kubeLabelKeptHome + "=true"
	} else {
		sel += "!" + kubeLabelKeptHome
	}
	var l *corev1.PersistentVolumeClaimList
	err := k.call(ctx, "list home claims", func(ctx context.Context) error {
		var err error
		l, err = k.cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		return err
	})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// takeKeptHome makes the home claim kept for the destroyed machine kept
// the claim of the new machine ref (of computerID), and returns its name;
// "" when none is kept (an operator deleted it): the new machine then
// makes its own. The update carries the claim's resourceVersion, so two
// takers never both win.
func (k *Kubernetes) takeKeptHome(ctx context.Context, kept, computerID, ref string) (string, error) {
	if !kubeRef.MatchString(kept) {
		return "", fmt.Errorf("kubernetes provider: kept home %q is no machine of this provider", kept)
	}
	claims, err := k.homeClaims(ctx, kept, true)
	if err != nil || len(claims) == 0 {
		return "", err
	}
	c := claims[0]
	if c.DeletionTimestamp != nil {
		return "", nil
	}
	for name, v := range k.labels(computerID, ref) {
		c.Labels[name] = v
	}
	delete(c.Labels, kubeLabelKeptHome)
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[kubeAnnotComputer] = computerID
	if err := k.call(ctx, "take over the kept home claim", func(ctx context.Context) error {
		_, err := k.cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).Update(ctx, &c, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return "", err
	}
	k.log.Info().Str("ref", ref).Str("claim", c.Name).Str("from", kept).Msg("took over a kept home claim")
	return c.Name, nil
}

// giveBackKeptHome marks claim kept for the destroyed machine kept again
// (a provision that took it over failed).
func (k *Kubernetes) giveBackKeptHome(ctx context.Context, claim, kept string) {
	err := k.call(ctx, "give back the kept home claim", func(ctx context.Context) error {
		c, err := k.cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Labels[kubeLabelMachine] = kept
		c.Labels[kubeLabelKeptHome] = "true"
		_, err = k.cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).Update(ctx, c, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		k.log.Warn().Err(err).Str("claim", claim).Msg("a kept home claim taken by a failed provision could not be marked kept again")
	}
}

// HomeAdopted reports whether ref's machine took over a kept home claim.
func (k *Kubernetes) HomeAdopted(ctx context.Context, ref string) (bool, error) {
	s, err := k.secret(ctx, ref)
	if err != nil {
		return false, err
	}
	return s.Annotations[kubeAnnotHomeClaim] != "", nil
}

// networkPolicy is computer ref's ingress policy: only pods that match
// WorkerSelector (a worker in the cluster, KUBERNETES_CONNECT=service) may
// reach its botd, on port 7000; nothing else reaches the pod at all, other
// computers' pods included. A port-forward does not cross the pod network
// (the kubelet dials inside the pod), so the worker outside the cluster is
// not affected. Enforced by the cluster's network plugin; one that does
// not enforce NetworkPolicy (the test cluster's bridge) ignores it.
func (k *Kubernetes) networkPolicy(computerID, ref string) *networkingv1.NetworkPolicy {
	port := intstr.FromInt32(containerAPIPort)
	tcp := corev1.ProtocolTCP
	return &networkingv1.NetworkPolicy{
		ObjectMeta: k.meta(ref, computerID, ref),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{kubeLabelMachine: ref}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: k.o.WorkerSelector}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		},
	}
}

// notReady adds what to do to an error of the first call a computer makes.
func (k *Kubernetes) notReady(err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes provider: namespace %s does not exist (create it, and the worker's Role in it): %w", k.o.Namespace, err)
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("kubernetes provider: the worker may not manage computers in namespace %s (its Role: deploy/kubernetes/worker-rbac.yaml): %w", k.o.Namespace, err)
	}
	return err
}

// secret is ref's Secret; ErrGone when it (the incarnation) is gone.
func (k *Kubernetes) secret(ctx context.Context, ref string) (*corev1.Secret, error) {
	if !kubeRef.MatchString(ref) {
		return nil, fmt.Errorf("%w: malformed ref", ErrGone)
	}
	var s *corev1.Secret
	err := k.call(ctx, "get secret", func(ctx context.Context) error {
		var err error
		s, err = k.cs.CoreV1().Secrets(k.o.Namespace).Get(ctx, ref, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, ErrGone
	}
	if err != nil {
		return nil, err
	}
	if s.Labels[kubeManagedBy] != kubeManagedByValue || s.Labels[kubeLabelMachine] != ref {
		return nil, fmt.Errorf("%w: secret %s is not an open-bot computer's", ErrGone, ref)
	}
	return s, nil
}

// pod is the computer's pod spec.
func (k *Kubernetes) pod(s *corev1.Secret, ref string) *corev1.Pod {
	computerID := s.Annotations[kubeAnnotComputer]
	env := []corev1.EnvVar{
		{Name: "BOTD_TOKEN_FILE", Value: containerTokenPath},
		{Name: "MAX_SCREENS", Value: strconv.Itoa(k.o.MaxScreens)},
	}
	items := []corev1.KeyToPath{{Key: "botd_token", Path: "botd_token"}}
	if _, ok := s.Data["model_api_key"]; ok {
		items = append(items, corev1.KeyToPath{Key: "model_api_key", Path: "model_api_key"})
		env = append(env, corev1.EnvVar{Name: "MODEL_API_KEY_FILE", Value: containerModelKeyPath})
	}
	for _, kv := range k.o.Env {
		name, val, _ := strings.Cut(kv, "=")
		if name == "BOTD_TOKEN" || name == "MODEL_API_KEY" {
			continue
		}
		env = append(env, corev1.EnvVar{Name: name, Value: val})
	}
	readOnly := int32(0o400)
	shm := resource.MustParse("1Gi")
	no := false
	grace := int64(20)
	ports := []corev1.ContainerPort{{Name: "botd", ContainerPort: containerAPIPort, Protocol: corev1.ProtocolTCP}}
	// Each secret is its own file (subPath): a secret volume's files are
	// symbolic links into a timestamped directory, and botd opens its token
	// and key without following links.
	mounts := []corev1.VolumeMount{{Name: "home", MountPath: "/home"}, {Name: "shm", MountPath: "/dev/shm"}}
	for _, it := range items {
		mounts = append(mounts, corev1.VolumeMount{Name: "secrets", MountPath: path.Join(path.Dir(containerTokenPath), it.Path), SubPath: it.Path, ReadOnly: true})
	}
	return &corev1.Pod{
		ObjectMeta: k.meta(ref, computerID, ref),
		Spec: corev1.PodSpec{
			Hostname:      "computer",
			RestartPolicy: corev1.RestartPolicyAlways,
			// The bot has a shell: no API credentials and no list of the
			// cluster's services reach it.
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "computer",
				Image:           k.o.Image,
				ImagePullPolicy: k.o.PullPolicy,
				Env:             env,
				Ports:           ports,
				Resources:       k.o.Resources,
				SecurityContext: &corev1.SecurityContext{
					Privileged:               &no,
					AllowPrivilegeEscalation: &no,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: kubeCapabilities},
				},
				VolumeMounts: mounts,
			}},
			Volumes: []corev1.Volume{
				{Name: "home", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimOf(s, ref)}}},
				{Name: "secrets", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: ref, Items: items, DefaultMode: &readOnly}}},
				{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &shm}}},
			},
		},
	}
}

// Reconnect makes the computer's pod when it is missing (a new computer, a
// stopped one, or a pod lost behind the worker's back: the same claim
// comes back), waits until it runs and its botd answers. ErrGone when the
// incarnation's Secret is gone.
func (k *Kubernetes) Reconnect(ctx context.Context, ref string, _ Spec) (Machine, error) {
	s, err := k.secret(ctx, ref)
	if err != nil {
		return nil, err
	}
	token := strings.TrimSpace(string(s.Data["botd_token"]))
	if len(token) < 16 {
		return nil, fmt.Errorf("kubernetes provider: secret %s holds no botd token", ref)
	}
	if k.sandboxMode() {
		return k.reconnectSandbox(ctx, s, ref, token)
	}
	deadline := time.Now().Add(k.o.ReadyTimeout)
	uid, err := k.ensurePod(ctx, s, ref, deadline)
	if err != nil {
		return nil, err
	}
	var m Machine
	var d *podDialer
	switch k.o.Connect {
	case KubeConnectService:
		m = machines.NewBotd(fmt.Sprintf("http://%s.%s.svc:%d", ref, k.o.Namespace, containerAPIPort), token)
	default:
		d = k.dialer(ref)
		tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}
		m = machines.BotdOf(client.New("http://botd", token, &http.Client{Transport: tr}))
	}
	var lastCheck time.Time
	exited := func() error {
		if time.Since(lastCheck) < time.Second {
			return nil
		}
		lastCheck = time.Now()
		if d != nil {
			if err := d.Denied(); err != nil {
				return fmt.Errorf("the worker may not reach the pod (its Role: deploy/kubernetes/worker-rbac.yaml): %w", err)
			}
		}
		p, err := k.cs.CoreV1().Pods(k.o.Namespace).Get(ctx, ref, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s was deleted while starting", ref)
		}
		if err != nil {
			return nil
		}
		return k.podFailed(ctx, p)
	}
	if err := awaitHealthy(ctx, m, time.Until(deadline), exited); err != nil {
		return nil, fmt.Errorf("kubernetes provider: computer %s: %w", ref, err)
	}
	return &kubeMachine{Machine: m, k: k, pod: ref, uid: uid}, nil
}

// kubeMachine is a computer's botd whose health also asks the API server
// about its pod: a pod being deleted, gone or replaced is not healthy even
// while its botd still answers through a connection made before (a pod
// deleted with no grace period keeps running for a moment; a pooled pod
// deleted so was once handed out as healthy). When the API server does
// not answer, botd's own answer stands.
type kubeMachine struct {
	Machine
	k   *Kubernetes
	pod string
	uid types.UID
}

// Unwrap is the botd machine (machines' optional interfaces look there).
func (m *kubeMachine) Unwrap() Machine { return m.Machine }

// PrepareSpareScreen is botd's (the warm pool's spare screen).
func (m *kubeMachine) PrepareSpareScreen(ctx context.Context) error {
	if sp, ok := m.Machine.(interface{ PrepareSpareScreen(context.Context) error }); ok {
		return sp.PrepareSpareScreen(ctx)
	}
	return errors.New("kubernetes provider: this botd has no spare screen")
}

// Health implements Machine.
func (m *kubeMachine) Health(ctx context.Context) (shared.ComputerHealth, error) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	p, err := m.k.cs.CoreV1().Pods(m.k.o.Namespace).Get(pctx, m.pod, metav1.GetOptions{})
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		return shared.ComputerHealth{}, fmt.Errorf("kubernetes provider: pod %s is gone", m.pod)
	case err == nil && p.UID != m.uid:
		return shared.ComputerHealth{}, fmt.Errorf("kubernetes provider: pod %s was replaced", m.pod)
	case err == nil && p.DeletionTimestamp != nil:
		return shared.ComputerHealth{}, fmt.Errorf("kubernetes provider: pod %s is being deleted", m.pod)
	}
	return m.Machine.Health(ctx)
}

func (k *Kubernetes) dialer(ref string) *podDialer { return k.dialerFor(ref, ref) }

// dialerFor is computer ref's dialer to pod (a Sandbox's pod is named by
// its controller): a new one when the pod changed.
func (k *Kubernetes) dialerFor(ref, pod string) *podDialer {
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.dialers[ref]
	if d != nil && d.pod != pod {
		d.Close()
		d = nil
	}
	if d == nil {
		d = newPodDialer(k.o.Config, k.cs, k.o.Namespace, pod, containerAPIPort)
		k.dialers[ref] = d
	}
	return d
}

func (k *Kubernetes) dropDialer(ref string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if d := k.dialers[ref]; d != nil {
		d.Close()
		delete(k.dialers, ref)
	}
}

// ensurePod makes ref's pod when there is none (waiting out one being
// deleted, replacing one that ended), waits until it runs, and returns the
// running pod's UID.
func (k *Kubernetes) ensurePod(ctx context.Context, s *corev1.Secret, ref string, deadline time.Time) (types.UID, error) {
	pods := k.cs.CoreV1().Pods(k.o.Namespace)
	last := "no pod yet"
	for {
		var p *corev1.Pod
		err := k.call(ctx, "get pod", func(ctx context.Context) error {
			var err error
			p, err = pods.Get(ctx, ref, metav1.GetOptions{})
			return err
		})
		switch {
		case apierrors.IsNotFound(err):
			// Before a pod is made again: its claim must still be there
			// and not being deleted (a pod would wait for it forever).
			var claim *corev1.PersistentVolumeClaim
			if err := k.call(ctx, "get home claim", func(ctx context.Context) error {
				var err error
				claim, err = k.cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).Get(ctx, claimOf(s, ref), metav1.GetOptions{})
				return err
			}); apierrors.IsNotFound(err) {
				return "", fmt.Errorf("%w: the home claim %s of %s is gone", ErrGone, claimOf(s, ref), ref)
			} else if err != nil {
				return "", err
			}
			if claim.DeletionTimestamp != nil {
				return "", fmt.Errorf("%w: the home claim %s of %s is being deleted", ErrGone, claimOf(s, ref), ref)
			}
			err = k.call(ctx, "create pod", func(ctx context.Context) error {
				_, err := pods.Create(ctx, k.pod(s, ref), metav1.CreateOptions{})
				return err
			})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return "", err
			}
			k.log.Info().Str("ref", ref).Msg("pod created")
			last = "pod created"
		case err != nil:
			return "", err
		case p.DeletionTimestamp != nil:
			last = "the previous pod is still terminating"
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			// Evicted, or its node lost: a new pod on the same claim.
			k.log.Warn().Str("ref", ref).Str("phase", string(p.Status.Phase)).Str("reason", p.Status.Reason).Msg("pod ended; making it again")
			zero := int64(0)
			if err := k.call(ctx, "delete ended pod", func(ctx context.Context) error {
				return pods.Delete(ctx, ref, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID}})
			}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return "", err
			}
			last = "the previous pod ended (" + string(p.Status.Phase) + ")"
		case p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "":
			return p.UID, nil
		default:
			if err := k.podFailed(ctx, p); err != nil {
				return "", fmt.Errorf("kubernetes provider: computer %s: %w", ref, err)
			}
			last = podWaiting(p)
		}
		if time.Now().After(deadline) {
			if w := k.lastWarning(ctx, ref); w != "" {
				last += "; last warning: " + w
			}
			return "", fmt.Errorf("kubernetes provider: computer %s: pod not running after %s: %s", ref, k.o.ReadyTimeout, last)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("kubernetes provider: computer %s: %w (%s)", ref, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// lastWarning is the newest Warning event of pod ref ("" when none, or
// when events cannot be read): why the kubelet could not make its sandbox,
// why a claim does not bind.
func (k *Kubernetes) lastWarning(ctx context.Context, ref string) string {
	var evs *corev1.EventList
	if err := k.call(ctx, "list events", func(ctx context.Context) error {
		var err error
		evs, err = k.cs.CoreV1().Events(k.o.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + ref + ",type=Warning"})
		return err
	}); err != nil {
		return ""
	}
	var last *corev1.Event
	for i := range evs.Items {
		e := &evs.Items[i]
		if last == nil || e.LastTimestamp.After(last.LastTimestamp.Time) {
			last = e
		}
	}
	if last == nil {
		return ""
	}
	msg := last.Message
	if len(msg) > 500 {
		msg = msg[:500] + "…"
	}
	return last.Reason + ": " + msg
}

// kubeCapabilities are all the Linux capabilities a computer's container
// keeps (botd runs as root and starts everything else as the computer's
// users): CHOWN, DAC_OVERRIDE and FOWNER to make and hand over the homes
// and workspace; SETUID and SETGID to run the desktop, the browser and the
// bot's commands as their users; KILL to end a user's timed-out command.
// Each was measured necessary on the test cluster (dropping it fails
// botd's start or its tests); nothing else of Docker's default set is
// kept, and no privilege escalation (no setuid binary gains anything).
var kubeCapabilities = []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"}

// podWaiting says what a pod that does not run yet waits for.
func podWaiting(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return "not scheduled: " + c.Message
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return "container waiting: " + w.Reason + ": " + w.Message
		}
	}
	return "pod " + strings.ToLower(string(p.Status.Phase))
}

// podFailed says why a pod cannot come up without someone's help (nil
// while it may still): an image that is not there and will not be pulled,
// a configuration the kubelet refuses, botd exiting at start.
func (k *Kubernetes) podFailed(ctx context.Context, p *corev1.Pod) error {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "ErrImagePull", "ImagePullBackOff":
				return fmt.Errorf("container cannot start: %s: %s", w.Reason, w.Message)
			case "CrashLoopBackOff":
				return fmt.Errorf("botd keeps exiting (%s): %s", w.Reason, k.lastLog(ctx, p.Name))
			}
		}
		if t := cs.LastTerminationState.Terminated; t != nil && cs.RestartCount > 0 && !cs.Ready {
			return fmt.Errorf("container exited (code %d): %s", t.ExitCode, k.lastLog(ctx, p.Name))
		}
	}
	return nil
}

// lastLog is the reason botd gave in its last lines (tailLines' rule).
func (k *Kubernetes) lastLog(ctx context.Context, pod string) string {
	tail := int64(20)
	var out []byte
	_ = k.call(ctx, "pod log", func(ctx context.Context) error {
		rc, err := k.cs.CoreV1().Pods(k.o.Namespace).GetLogs(pod, &corev1.PodLogOptions{TailLines: &tail, Previous: true}).Stream(ctx)
		if err != nil {
			return err
		}
		defer rc.Close()
		out, err = io.ReadAll(io.LimitReader(rc, 64<<10))
		return err
	})
	var t tailLines
	t.write(append(bytes.TrimRight(out, "\n"), '\n'))
	return t.reason()
}

// deletePod deletes ref's pod (grace seconds) and waits until it is gone.
func (k *Kubernetes) deletePod(ctx context.Context, ref string, grace int64) error {
	pods := k.cs.CoreV1().Pods(k.o.Namespace)
	err := k.call(ctx, "delete pod", func(ctx context.Context) error {
		return pods.Delete(ctx, ref, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	wait := time.Duration(grace)*time.Second + 60*time.Second
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		_, err := pods.Get(ctx, ref, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubernetes provider: pod %s still there %s after its delete", ref, wait)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Stop deletes the computer's pod (botd gets SIGTERM, 20 s to end) and
// keeps its claim, Secret and Service: Reconnect makes the pod again on
// the same home.
func (k *Kubernetes) Stop(ctx context.Context, ref string) error {
	s, err := k.secret(ctx, ref)
	if err != nil {
		return err
	}
	k.dropDialer(ref)
	if k.sandboxMode() {
		name, err := k.sandboxOf(ctx, s, ref, time.Now())
		if err != nil {
			return err
		}
		return k.stopSandbox(ctx, name)
	}
	return k.deletePod(ctx, ref, 20)
}

// Destroy deletes the computer's pod, Service, Secret and home claim (its
// volume goes by the storage class's reclaim policy). A gone computer, or
// one partly gone, is fine.
func (k *Kubernetes) Destroy(ctx context.Context, ref string) error {
	return k.destroy(ctx, ref, false)
}

// DestroyKeepingHome is Destroy leaving the home claim, marked kept for
// ref: the scope's next computer, created with its restore key, takes it
// over (Spec.KeptHome). In agent-sandbox mode the claim is the Sandbox's
// (its controller deletes it with the Sandbox): the home is kept in the
// home store only, as for every other kind.
func (k *Kubernetes) DestroyKeepingHome(ctx context.Context, ref string) error {
	if k.sandboxMode() {
		return k.destroy(ctx, ref, false)
	}
	return k.destroy(ctx, ref, true)
}

func (k *Kubernetes) destroy(ctx context.Context, ref string, keepHome bool) error {
	if !kubeRef.MatchString(ref) {
		return nil
	}
	k.dropDialer(ref)
	var errs []error
	if k.sandboxMode() {
		if err := k.destroySandbox(ctx, ref); err != nil {
			errs = append(errs, err)
		}
	} else if err := k.deletePod(ctx, ref, 2); err != nil {
		return err
	}
	ns := k.o.Namespace
	for _, del := range []struct {
		what string
		f    func(ctx context.Context) error
	}{
		{"delete service", func(ctx context.Context) error {
			return k.cs.CoreV1().Services(ns).Delete(ctx, ref, metav1.DeleteOptions{})
		}},
		{"delete network policy", func(ctx context.Context) error {
			return k.cs.NetworkingV1().NetworkPolicies(ns).Delete(ctx, ref, metav1.DeleteOptions{})
		}},
		{"delete home claim", func(ctx context.Context) error {
			if k.sandboxMode() {
				return k.cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, homeClaim(ref), metav1.DeleteOptions{})
			}
			claims, err := k.homeClaims(ctx, ref, false)
			if err != nil {
				return err
			}
			var errs []error
			for _, c := range claims {
				if keepHome {
					c.Labels[kubeLabelKeptHome] = "true"
					_, err = k.cs.CoreV1().PersistentVolumeClaims(ns).Update(ctx, &c, metav1.UpdateOptions{})
				} else {
					err = k.cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, c.Name, metav1.DeleteOptions{})
				}
				if err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		}},
		{"delete secret", func(ctx context.Context) error {
			return k.cs.CoreV1().Secrets(ns).Delete(ctx, ref, metav1.DeleteOptions{})
		}},
	} {
		if err := k.call(ctx, del.what, del.f); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	k.log.Info().Str("ref", ref).Bool("home_kept", keepHome).Msg("destroyed")
	return nil
}

// List returns every computer of ours in the namespace (by its Secret),
// with whether its pod runs.
func (k *Kubernetes) List(ctx context.Context) ([]Listed, error) {
	sel := metav1.ListOptions{LabelSelector: kubeManagedBy + "=" + kubeManagedByValue}
	var secrets *corev1.SecretList
	if err := k.call(ctx, "list secrets", func(ctx context.Context) error {
		var err error
		secrets, err = k.cs.CoreV1().Secrets(k.o.Namespace).List(ctx, sel)
		return err
	}); err != nil {
		return nil, err
	}
	var pods *corev1.PodList
	if err := k.call(ctx, "list pods", func(ctx context.Context) error {
		var err error
		pods, err = k.cs.CoreV1().Pods(k.o.Namespace).List(ctx, sel)
		return err
	}); err != nil {
		return nil, err
	}
	running := map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			running[p.Labels[kubeLabelMachine]] = true
		}
	}
	out := make([]Listed, 0, len(secrets.Items))
	for _, s := range secrets.Items {
		ref := s.Labels[kubeLabelMachine]
		if ref != s.Name || !kubeRef.MatchString(ref) {
			continue
		}
		out = append(out, Listed{Ref: ref, ComputerID: s.Annotations[kubeAnnotComputer], Running: running[ref]})
	}
	return out, nil
}
