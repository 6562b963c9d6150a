// Command worker is open-bot's thin control plane: it relays model tool calls
// to botd and enforces who may do what. `worker egress` is the egress agent
// that a user runs on their own machine for botd's tunnel mode.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/open-bot/computer/apps/worker/egressagent"
)

const usage = `usage: worker <command> [flags]

commands:
  serve      run the worker's API (computers, runs, SSE events, direct tool calls)
  computers  create|list|adopt|add-bot|stop|start|destroy computers on a running worker
             (adopt and attach are the operator's: the operator socket or WORKER_OPERATOR_TOKEN)
  runs       start|watch|stop runs on a running worker
  egress     run the egress agent (botd's tunnel mode dials out through it)
  dashboard  print a one-time sign-in link to the running worker's dashboard (operator)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch os.Args[1] {
	case "serve":
		err = runServe(ctx, os.Args[2:])
	case "computers":
		err = runComputers(ctx, os.Args[2:])
	case "runs":
		err = runRuns(ctx, os.Args[2:])
	case "egress":
		err = egressagent.Command(ctx, os.Args[2:])
	case "dashboard":
		err = runDashboard(ctx, os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "worker: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
