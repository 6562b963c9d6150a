package main

import (
	"context"
	"errors"
)

// runEgress runs the egress agent. Implemented with the egress issue.
func runEgress(ctx context.Context, args []string) error {
	return errors.New("egress agent: not implemented yet")
}
