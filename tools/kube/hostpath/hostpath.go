// Package hostpath is the test cluster's storage: a dynamic provisioner
// for one StorageClass whose volumes are directories on the node (the
// cluster has one node). A claim of the class gets a PersistentVolume of
// its size whose hostPath is a new directory under Root, bound to it by
// the controller-manager's PV controller; a released volume of the class
// (reclaim policy Delete) has its directory removed and is deleted. It is
// what a cloud's CSI driver does for a real cluster, reduced to a single
// node; nothing in the project depends on it beyond the test cluster.
package hostpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Provisioner is the class's name and this provisioner's name.
const (
	Class       = "open-bot-local"
	Provisioner = "open-bot.dev/hostpath"
	annotBy     = "pv.kubernetes.io/provisioned-by"
)

// Run ensures the StorageClass (the cluster's default) and provisions and
// deletes volumes under root until ctx ends. It polls every interval: the
// test cluster's claims are few.
func Run(ctx context.Context, cs kubernetes.Interface, root string, logf func(string, ...any)) error {
	if !filepath.IsAbs(root) {
		return fmt.Errorf("hostpath: root %q is not absolute", root)
	}
	if err := os.MkdirAll(root, 0o711); err != nil {
		return err
	}
	if err := ensureClass(ctx, cs); err != nil {
		return err
	}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		if err := pass(ctx, cs, root, logf); err != nil && ctx.Err() == nil {
			logf("hostpath: %v", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func ensureClass(ctx context.Context, cs kubernetes.Interface) error {
	reclaim := corev1.PersistentVolumeReclaimDelete
	mode := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: Class, Annotations: map[string]string{
			"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner: Provisioner, ReclaimPolicy: &reclaim, VolumeBindingMode: &mode,
	}
	for {
		_, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hostpath: create the storage class: %w", err)
		case <-time.After(time.Second):
		}
	}
}

func pass(ctx context.Context, cs kubernetes.Interface, root string, logf func(string, ...any)) error {
	claims, err := cs.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.Status.Phase != corev1.ClaimPending || c.Spec.VolumeName != "" || c.DeletionTimestamp != nil {
			continue
		}
		if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != Class {
			continue
		}
		if err := provision(ctx, cs, root, c); err != nil {
			logf("hostpath: provision %s/%s: %v", c.Namespace, c.Name, err)
		} else {
			logf("hostpath: provisioned %s/%s", c.Namespace, c.Name)
		}
	}
	vols, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range vols.Items {
		v := &vols.Items[i]
		if v.Annotations[annotBy] != Provisioner || v.Status.Phase != corev1.VolumeReleased ||
			v.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || v.Spec.HostPath == nil {
			continue
		}
		dir := filepath.Clean(v.Spec.HostPath.Path)
		if filepath.Dir(dir) != filepath.Clean(root) || !strings.HasPrefix(filepath.Base(dir), "pvc-") {
			logf("hostpath: volume %s's path %s is not one of ours; left alone", v.Name, dir)
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			logf("hostpath: remove %s: %v", dir, err)
			continue
		}
		if err := cs.CoreV1().PersistentVolumes().Delete(ctx, v.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			logf("hostpath: delete volume %s: %v", v.Name, err)
			continue
		}
		logf("hostpath: deleted volume %s", v.Name)
	}
	return nil
}

func provision(ctx context.Context, cs kubernetes.Interface, root string, c *corev1.PersistentVolumeClaim) error {
	name := "pvc-" + string(c.UID)
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	size, ok := c.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return fmt.Errorf("the claim requests no storage")
	}
	hostType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotBy: Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   c.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              Class,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostType}},
		},
	}
	_, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
