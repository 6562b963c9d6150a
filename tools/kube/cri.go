package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runCRIClean stops and removes every pod sandbox (and so its containers)
// of one CRI endpoint, the way the kubelet would: StopPodSandbox tears the
// pod's network down through CNI (its veth, its host-local address), so
// nothing of it is left on the bridge. scripts/kube.sh stop runs it after
// the kubelet is gone and before containerd is stopped.
func runCRIClean() int {
	fs := flag.NewFlagSet("cri-clean", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "CRI endpoint, unix:///path/to/containerd.sock (required)")
	timeout := fs.Duration("timeout", 2*time.Minute, "overall time limit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if !strings.HasPrefix(*endpoint, "unix://") {
		fmt.Fprintln(os.Stderr, "cri-clean: --endpoint must be unix:///path")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	n, err := criClean(ctx, *endpoint)
	fmt.Fprintf(os.Stderr, "cri-clean: removed %d pod sandbox(es)\n", n)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cri-clean: %v\n", err)
		return 1
	}
	return 0
}

func criClean(ctx context.Context, endpoint string) (int, error) {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("list pod sandboxes: %w", err)
	}
	var errs []error
	n := 0
	for _, sb := range resp.Items {
		name := sb.GetMetadata().GetNamespace() + "/" + sb.GetMetadata().GetName()
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", name, err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", name, err))
			continue
		}
		n++
	}
	// Containers outside any listed sandbox (there should be none).
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return n, errors.Join(append(errs, fmt.Errorf("list containers: %w", err))...)
	}
	for _, c := range cs.Containers {
		if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.GetMetadata().GetName(), err))
		}
	}
	return n, errors.Join(errs...)
}
