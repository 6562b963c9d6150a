package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// runEtcd starts a one-member etcd (go.etcd.io/etcd/server/v3's embed
// package, the version k8s.io/kubernetes itself requires) and serves until
// SIGTERM or SIGINT. It is meant for loopback URLs only: no TLS, no auth.
func runEtcd() int {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "data directory (required)")
	client := fs.String("listen-client", "http://127.0.0.1:2379", "client URL (loopback)")
	peer := fs.String("listen-peer", "http://127.0.0.1:2380", "peer URL (loopback; one member, no peers connect)")
	quota := fs.Int64("quota-backend-bytes", 2<<30, "backend size quota")
	logLevel := fs.String("log-level", "warn", "debug|info|warn|error")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		return 2
	}
	cu, err := url.Parse(*client)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: --listen-client: %v\n", err)
		return 2
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: --listen-peer: %v\n", err)
		return 2
	}

	cfg := embed.NewConfig()
	cfg.Name = "open-bot-kube"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.QuotaBackendBytes = *quota
	cfg.LogLevel = *logLevel
	cfg.LogOutputs = []string{"stderr"}
	// NewConfig leaves this zero, which logs every request as expensive.
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	// A test cluster: keep the history short so the data dir stays small.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: start: %v\n", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(os.Stderr, "etcd: ready, serving clients on %s\n", cu)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		fmt.Fprintln(os.Stderr, "etcd: not ready after 60s")
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "etcd: %v, stopping\n", s)
		return 0
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		return 1
	}
}
