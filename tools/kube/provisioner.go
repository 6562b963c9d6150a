package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/open-bot/computer/tools/kube/hostpath"
)

// runProvisioner is `kube hostpath-provisioner --kubeconfig F --root DIR`:
// the test cluster's storage (package hostpath), until SIGTERM.
func runProvisioner() int {
	fs := flag.NewFlagSet("hostpath-provisioner", flag.ContinueOnError)
	kc := fs.String("kubeconfig", "", "the controller's kubeconfig")
	root := fs.String("root", "", "the directory the volumes are made in")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *kc == "" || *root == "" {
		fmt.Fprintln(os.Stderr, "hostpath-provisioner: --kubeconfig and --root are required")
		return 2
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostpath-provisioner:", err)
		return 1
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostpath-provisioner:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
	if err := hostpath.Run(ctx, cs, *root, logf); err != nil {
		logf("hostpath-provisioner: %v", err)
		return 1
	}
	return 0
}
