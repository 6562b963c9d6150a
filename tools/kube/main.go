// Command kube is one binary holding the Kubernetes components that
// scripts/kube.sh runs for a single-node test cluster: the shared packages of
// kube-apiserver, kube-controller-manager, kube-scheduler, the kubelet and
// kubectl are compiled and linked once (the old "hyperkube" layout), plus an
// embedded etcd and a small certificate maker.
//
//	kube apiserver|controller-manager|scheduler|kubelet|kubectl [flags]
//	kube etcd --data-dir DIR [--listen-client URL] [--listen-peer URL]
//	kube certs --dir DIR --node-name NAME --node-ip IP [--apiserver URL]
//	kube cri-clean --endpoint unix:///path/containerd.sock
//	kube hostpath-provisioner --kubeconfig F --root DIR
//	kube version
//
// It is built by scripts/kube.sh into a per-machine cache, never into git.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // CronJob time zones, as the upstream mains import

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's auth plugins
)

// component runs one subcommand; os.Args has already been rewritten so that
// os.Args[0] is the component's usual name and os.Args[1:] its own flags,
// which is what cobra (and kubectl's plugin lookup) read.
type component func() int

func cobraMain(newCmd func() *cobra.Command) component {
	return func() int { return cli.Run(newCmd()) }
}

var components = map[string]struct {
	name string // the upstream binary name, put in os.Args[0]
	run  component
}{
	"apiserver":          {"kube-apiserver", cobraMain(apiserver.NewAPIServerCommand)},
	"controller-manager": {"kube-controller-manager", cobraMain(controllermanager.NewControllerManagerCommand)},
	"scheduler":          {"kube-scheduler", cobraMain(func() *cobra.Command { return scheduler.NewSchedulerCommand() })},
	"kubelet": {"kubelet", cobraMain(func() *cobra.Command {
		return kubelet.NewKubeletCommand(context.Background())
	})},
	"kubectl":   {"kubectl", runKubectl},
	"etcd":      {"etcd", runEtcd},
	"certs":     {"kube-certs", runCerts},
	"cri-clean": {"kube-cri-clean", runCRIClean},
	// the test cluster's storage class (package hostpath)
	"hostpath-provisioner": {"kube-hostpath-provisioner", runProvisioner},
	"version":              {"kube-version", runVersion},
}

func runKubectl() int {
	// As cmd/kubectl does: the verbosity is read before the command is built.
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) //nolint:errcheck
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err) // prints and exits non-zero
	}
	return 0
}

func usage() {
	names := make([]string, 0, len(components))
	for n := range components {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: %s COMPONENT [flags]\ncomponents: %v\n", filepath.Base(os.Args[0]), names)
}

func main() {
	name := ""
	rest := []string{}
	// Called through a link named after a component (kubectl -> kube) the
	// link's name chooses it, as with hyperkube.
	if c, ok := components[filepath.Base(os.Args[0])]; ok && c.run != nil {
		name, rest = filepath.Base(os.Args[0]), os.Args[1:]
	} else if len(os.Args) >= 2 {
		name, rest = os.Args[1], os.Args[2:]
	}
	c, ok := components[name]
	if !ok {
		usage()
		os.Exit(2)
	}
	os.Args = append([]string{c.name}, rest...)
	os.Exit(c.run())
}
