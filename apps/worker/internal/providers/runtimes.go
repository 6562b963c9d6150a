package providers

import (
	"github.com/open-bot/computer/apps/worker/internal/providers/daytona"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b"
)

// The runtimes a run can use (issue 30): where its agent loop runs.
const (
	// RuntimeWorker is the worker's own loop: it calls the model and
	// drives the machine through the tools; the model key stays in the
	// worker. Every machine offers it.
	RuntimeWorker = "worker"
	// RuntimeMachine is Codex's app-server inside the machine, under
	// botd (root), which holds the model key there. Only botd machines
	// offer it: a vendor's stock desktop has no root between the bot's
	// shell and whatever runs there.
	RuntimeMachine = "machine"
)

// desktopRef is a provider whose machines may be vendors' stock desktops
// (the command-driven desktop machine) rather than botd.
type desktopRef interface {
	// DesktopRef reports whether the machine behind ref is a stock desktop.
	DesktopRef(ref string) bool
}

// DesktopRef implements desktopRef: the desktop template.
func (x *E2B) DesktopRef(ref string) bool {
	r, err := e2b.ParseRef(ref)
	return err == nil && e2b.Desktop(r.Template)
}

// DesktopRef implements desktopRef: the desktop snapshot.
func (x *Daytona) DesktopRef(ref string) bool {
	r, err := daytona.ParseRef(ref)
	return err == nil && daytona.Desktop(r.Snapshot)
}

// DesktopRef implements desktopRef: every box is Box's own desktop.
func (x *Box) DesktopRef(string) bool { return true }

// Runtimes lists the runtimes a machine of p behind ref offers, the
// default first: a stock desktop only the worker's loop, botd machines
// Codex in the machine (the default there) and the worker's loop.
func Runtimes(p Provider, ref string) []string {
	if d, ok := p.(desktopRef); ok && d.DesktopRef(ref) {
		return []string{RuntimeWorker}
	}
	return []string{RuntimeMachine, RuntimeWorker}
}
