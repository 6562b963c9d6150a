// Command pause is the pod sandbox's process for the test cluster's
// containerd (its sandbox_image): it holds the pod's namespaces, reaps
// children adopted when the pod shares one PID namespace, and exits 0 on
// SIGTERM or SIGINT. Built static (CGO_ENABLED=0) into an image FROM scratch
// by scripts/kube.sh.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
