package providers

// Warm starts in agent-sandbox mode (KUBERNETES_SANDBOX_WARM_POOL=N): the
// provider keeps a SandboxWarmPool of N ready Sandboxes, and a computer is
// a SandboxClaim on it instead of a Sandbox of its own.
//
// A warm pool's Sandboxes are made from one SandboxTemplate before any
// computer exists, and a claim that adds env (or anything else to the pod)
// would force a cold start. So every pooled pod starts with the same
// pool token, from the pool's Secret (<template>-pool, mounted root-only
// like a computer's), and the computer's own token is pushed after the
// claim: the first reconnect finds botd refusing the computer's token,
// opens it with the pool token and has it take the computer's (botd's
// PUT /token, held in memory only). A restarted botd is back on the pool
// token, and the next reconnect adopts it again. The pool token opens only
// unclaimed pods and pods whose botd restarted before the worker reached
// it again; it never leaves the worker and the pool's Secret.
//
// Names: the pool's Secret, SandboxTemplate and SandboxWarmPool are all
// <KUBERNETES_SANDBOX_TEMPLATE>-pool; the pool's template is made from the
// operator's SandboxTemplate (as a computer's Sandbox is) with the pool's
// Secret and the home's volumeClaimTemplate. A computer is its Secret (the
// incarnation's anchor, annotated with the pool) and a SandboxClaim of the
// same name; the controller names the Sandbox it bound in the claim's
// status.sandbox.name.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/open-bot/computer/apps/worker/internal/providers/agentsandbox"
	"github.com/open-bot/computer/pkg/shared/client"
)

// kubeAnnotWarmPool, on a computer's Secret, names the SandboxWarmPool its
// SandboxClaim is on.
const kubeAnnotWarmPool = "dev.open-bot/warm-pool"

// kubeLabelPool marks the pool's own objects.
const kubeLabelPool = "dev.open-bot/pool"

// MaxSandboxWarmPool caps KUBERNETES_SANDBOX_WARM_POOL.
const MaxSandboxWarmPool = 64

func (k *Kubernetes) warmPoolMode() bool { return k.sandboxMode() && k.o.SandboxWarmPool > 0 }

// poolName is the name of the pool's Secret, SandboxTemplate and
// SandboxWarmPool.
func (k *Kubernetes) poolName() string { return k.o.SandboxTemplate + "-pool" }

func (k *Kubernetes) poolMeta() map[string]any {
	return map[string]any{"name": k.poolName(), "namespace": k.o.Namespace,
		"labels": map[string]any{kubeManagedBy: kubeManagedByValue, kubeLabelPool: "true"}}
}

// ensureWarmPool makes the pool's Secret, SandboxTemplate and
// SandboxWarmPool when they are missing, and sets an existing warm pool's
// replicas to the configured number; once per provider.
func (k *Kubernetes) ensureWarmPool(ctx context.Context) error {
	k.poolMu.Lock()
	defer k.poolMu.Unlock()
	if k.poolReady {
		return nil
	}
	name := k.poolName()
	sec, err := k.poolSecret(ctx)
	if errors.Is(err, ErrGone) {
		var tok [32]byte
		_, _ = rand.Read(tok[:])
		data := k.secretData(hex.EncodeToString(tok[:]))
		immutable := true
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.o.Namespace,
			Labels:      map[string]string{kubeManagedBy: kubeManagedByValue, kubeLabelPool: "true"},
			Annotations: map[string]string{}}, Type: corev1.SecretTypeOpaque, Data: data, Immutable: &immutable}
		err = k.call(ctx, "create the warm pool's secret", func(ctx context.Context) error {
			_, err := k.cs.CoreV1().Secrets(k.o.Namespace).Create(ctx, sec, metav1.CreateOptions{})
			return err
		})
		if apierrors.IsAlreadyExists(err) {
			sec, err = k.poolSecret(ctx)
		}
	}
	if err != nil {
		return k.notReady(err)
	}
	err = k.call(ctx, "get the warm pool's template", func(ctx context.Context) error {
		_, err := k.dyn.Resource(agentsandbox.SandboxTemplates).Namespace(k.o.Namespace).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		base, err := k.templatePod(ctx)
		if err != nil {
			return err
		}
		sb, err := k.sandbox(sec, name, base)
		if err != nil {
			return err
		}
		spec := sb["spec"].(map[string]any)
		obj := map[string]any{"apiVersion": agentsandbox.APIVersionExtends, "kind": "SandboxTemplate", "metadata": k.poolMeta(),
			"spec": map[string]any{"podTemplate": spec["podTemplate"], "volumeClaimTemplates": spec["volumeClaimTemplates"], "service": true}}
		if err := k.createCR(ctx, "create the warm pool's template", obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	} else if err != nil {
		return k.notReady(err)
	}
	var wp *unstructured.Unstructured
	err = k.call(ctx, "get the warm pool", func(ctx context.Context) error {
		var err error
		wp, err = k.dyn.Resource(agentsandbox.SandboxWarmPools).Namespace(k.o.Namespace).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		obj := map[string]any{"apiVersion": agentsandbox.APIVersionExtends, "kind": "SandboxWarmPool", "metadata": k.poolMeta(),
			"spec": map[string]any{"replicas": int64(k.o.SandboxWarmPool), "sandboxTemplateRef": map[string]any{"name": name}}}
		if err := k.createCR(ctx, "create the warm pool", obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		k.log.Info().Str("pool", name).Int("replicas", k.o.SandboxWarmPool).Msg("sandbox warm pool created")
	case err != nil:
		return k.notReady(err)
	default:
		if n, _, _ := unstructured.NestedInt64(wp.Object, "spec", "replicas"); n != int64(k.o.SandboxWarmPool) {
			_ = unstructured.SetNestedField(wp.Object, int64(k.o.SandboxWarmPool), "spec", "replicas")
			if err := agentsandbox.Validate(wp.Object); err != nil {
				return fmt.Errorf("kubernetes provider: %w", err)
			}
			if err := k.call(ctx, "set the warm pool's replicas", func(ctx context.Context) error {
				_, err := k.dyn.Resource(agentsandbox.SandboxWarmPools).Namespace(k.o.Namespace).Update(ctx, wp, metav1.UpdateOptions{})
				return err
			}); err != nil {
				return err
			}
			k.log.Info().Str("pool", name).Int64("from", n).Int("replicas", k.o.SandboxWarmPool).Msg("sandbox warm pool resized")
		}
	}
	k.poolReady = true
	return nil
}

// poolSecret is the pool's Secret; ErrGone when there is none.
func (k *Kubernetes) poolSecret(ctx context.Context) (*corev1.Secret, error) {
	var s *corev1.Secret
	err := k.call(ctx, "get the warm pool's secret", func(ctx context.Context) error {
		var err error
		s, err = k.cs.CoreV1().Secrets(k.o.Namespace).Get(ctx, k.poolName(), metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, ErrGone
	}
	if err != nil {
		return nil, err
	}
	if s.Labels[kubeManagedBy] != kubeManagedByValue || s.Labels[kubeLabelPool] != "true" {
		return nil, fmt.Errorf("kubernetes provider: secret %s is not this worker's warm pool's", k.poolName())
	}
	return s, nil
}

// provisionClaim is Provision with a warm pool: the SandboxClaim, with
// nothing but its pool (no env, no volumes: a claim adds nothing to the
// pod, so a ready Sandbox can be bound as it is).
func (k *Kubernetes) provisionClaim(ctx context.Context, s *corev1.Secret, ref string) error {
	if err := k.ensureWarmPool(ctx); err != nil {
		return err
	}
	obj := map[string]any{"apiVersion": agentsandbox.APIVersionExtends, "kind": "SandboxClaim",
		"metadata": map[string]any{"name": ref, "namespace": k.o.Namespace, "labels": stringMap(s.Labels), "annotations": stringMap(map[string]string{kubeAnnotComputer: s.Annotations[kubeAnnotComputer]})},
		"spec":     map[string]any{"warmPoolRef": map[string]any{"name": k.poolName()}}}
	return k.createCR(ctx, "create sandbox claim", obj)
}

// boundSandbox is the name of the Sandbox the controller bound to claim
// ref (status.sandbox.name), "" while none is; ErrGone when the claim is
// gone.
func (k *Kubernetes) boundSandbox(ctx context.Context, ref string) (string, error) {
	var u *unstructured.Unstructured
	err := k.call(ctx, "get sandbox claim", func(ctx context.Context) error {
		var err error
		u, err = k.dyn.Resource(agentsandbox.SandboxClaims).Namespace(k.o.Namespace).Get(ctx, ref, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("%w: sandbox claim %s is gone", ErrGone, ref)
	}
	if err != nil {
		return "", err
	}
	if u.GetDeletionTimestamp() != nil {
		return "", fmt.Errorf("%w: sandbox claim %s is being deleted", ErrGone, ref)
	}
	name, _, _ := unstructured.NestedString(u.Object, "status", "sandbox", "name")
	return name, nil
}

// claimedSandbox is boundSandbox waiting for the binding until deadline.
func (k *Kubernetes) claimedSandbox(ctx context.Context, ref string, deadline time.Time) (string, error) {
	for {
		name, err := k.boundSandbox(ctx, ref)
		if err != nil || name != "" {
			return name, err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("kubernetes provider: the warm pool %s has not bound sandbox claim %s after %s: no controller has written its status (is agent-sandbox's controller installed in the cluster, and does the pool have ready sandboxes?)", k.poolName(), ref, k.o.ReadyTimeout)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// sandboxOf is the Sandbox that is computer ref's: its own (named ref), or
// the one its claim is bound to.
func (k *Kubernetes) sandboxOf(ctx context.Context, s *corev1.Secret, ref string, deadline time.Time) (string, error) {
	if s.Annotations[kubeAnnotWarmPool] == "" {
		return ref, nil
	}
	return k.claimedSandbox(ctx, ref, deadline)
}

// adoptToken makes botd at c's address answer to c's token (the
// computer's): when botd refuses it, the pool's token (poolToken) opens it
// and botd takes the computer's (PUT /token). It retries what is not an
// answer (botd still starting) until deadline; a botd that refuses both
// tokens is an error at once.
func adoptToken(ctx context.Context, c *client.Client, poolToken string, deadline time.Time) (adopted bool, err error) {
	for {
		_, err := c.Health(ctx)
		if err == nil {
			return false, nil
		}
		if botdStatus(err) == http.StatusUnauthorized && poolToken != "" {
			pc := client.New(c.BaseURL(), poolToken, c.HTTPClient())
			_, err = pc.RotateToken(ctx, c.Token())
			if err == nil {
				return true, nil
			}
			if botdStatus(err) == http.StatusUnauthorized {
				// A rotation whose answer was lost already happened:
				// the computer's token may open it now.
				if _, herr := c.Health(ctx); herr == nil {
					return false, nil
				}
				return false, errors.New("botd refuses both the computer's token and the warm pool's: it is not this computer's machine")
			}
		} else if botdStatus(err) == http.StatusUnauthorized {
			return false, errors.New("botd refuses the computer's token")
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("botd did not take the computer's token: %w", err)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// botdStatus is the HTTP status of botd's error answer (0: no answer).
func botdStatus(err error) int {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}
