package atspi

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/open-bot/computer/pkg/shared"
)

// TestRolesAndStates: AT-SPI roles and states in the browser's words; a
// label-like "text" and a row's unnamed cells are left out.
func TestRolesAndStates(t *testing.T) {
	st := func(bits ...int) states {
		var s states
		for _, b := range bits {
			s[b/32] |= 1 << (b % 32)
		}
		return s
	}
	for _, c := range []struct {
		role, name  string
		st          states
		want        string
		interactive bool
	}{
		{"push button", "OK", st(stEnabled, stSensitive), "button", true},
		{"menu", "File", st(), "menuitem", true},
		{"password text", "", st(stEditable, stFocusable), "textbox", true},
		{"text", "a label", st(), "", false},
		{"text", "", st(stEditable), "textbox", true},
		{"table cell", "", st(stSelectable), "", false},
		{"table cell", "Home", st(stSelectable), "gridcell", true},
		{"dialog", "Save", st(), "dialog", false},
		{"dialog", "", st(), "", false},
		{"filler", "x", st(), "", false},
	} {
		got, inter := mapRole(&node{roleName: c.role, name: c.name, st: c.st})
		if got != c.want || inter != c.interactive {
			t.Errorf("%s %q: got %q %v, want %q %v", c.role, c.name, got, inter, c.want, c.interactive)
		}
	}
	n := &node{roleName: "toggle button", st: st(stChecked, stFocused, stExpandable)}
	if got := strings.Join(stateNames(n), ","); got != "focused,disabled,pressed,collapsed" {
		t.Errorf("states: %s", got)
	}
	if got := stateNames(&node{roleName: "password text", st: st(stEnabled)}); len(got) != 1 || got[0] != "password" {
		t.Errorf("password states: %v", got)
	}
}

// TestIDs: desktop ids are stable, start with "d" and pass the act
// schema's id check.
func TestIDs(t *testing.T) {
	a, b := ID(":1.5", "/org/a11y/atspi/accessible/12"), ID(":1.5", "/org/a11y/atspi/accessible/12")
	if a != b || !IsID(a) || len(a) != 11 {
		t.Fatalf("ids %s %s", a, b)
	}
	if ID(":1.5", "/org/a11y/atspi/accessible/13") == a || ID(":1.6", "/org/a11y/atspi/accessible/12") == a {
		t.Fatal("ids collide")
	}
	if err := shared.ValidateActionsElements([]shared.Action{{Type: shared.ActionClick, Element: a}}, 1280, 800); err != nil {
		t.Fatalf("schema refuses %s: %v", a, err)
	}
}

// TestPasswordValueNeverRead: a password field's value is never asked for
// (readValues skips it before any D-Bus call: with no connection, asking
// would fail the test by panicking).
func TestPasswordValueNeverRead(t *testing.T) {
	r := &Reader{}
	es := []Element{{Element: shared.Element{ID: "d1", Role: "textbox", States: []string{"password"}}}}
	if err := r.readValues(context.Background(), nil, es); err != nil {
		t.Fatal(err)
	}
	if es[0].Value != nil {
		t.Fatalf("a password field carries a value: %q", *es[0].Value)
	}
}

// TestPeerMustBeDesktop: a bus socket whose listener is not the desktop
// user (here: root, this test) is refused before anything is said on it,
// so a link planted in the desktop-owned runtime directory cannot point
// botd at a root service.
func TestPeerMustBeDesktop(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the listener must be another user than the desktop's")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "bus")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	said := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		said <- n
	}()
	r := &Reader{UID: 60100}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = r.Elements(ctx, sock, 1280, 800)
	if err == nil || !strings.Contains(err.Error(), "not the desktop user") {
		t.Fatalf("a root listener was accepted: %v", err)
	}
	if n := <-said; n != 0 {
		t.Fatalf("botd said %d bytes to a listener that is not the desktop user", n)
	}
}

// TestNoBus: a screen whose accessibility bus has not started has no
// desktop elements (ErrNoBus), not an error.
func TestNoBus(t *testing.T) {
	r := &Reader{UID: 60100}
	_, err := r.Elements(context.Background(), filepath.Join(t.TempDir(), "at-spi", "bus_1"), 1280, 800)
	if err != ErrNoBus {
		t.Fatalf("got %v", err)
	}
}
