package screen

import (
	"context"
	"net/http"
	"sort"
	"strings"

	"github.com/open-bot/computer/pkg/shared"
)

// Launcher starts one desktop application on a running screen, inside
// WithLease. It returns the pid when it knows one.
type Launcher func(ctx context.Context, s *Screen) (pid int, err error)

// argvLauncher runs argv on the screen as the desktop user.
func argvLauncher(name string, argv ...string) Launcher {
	return func(ctx context.Context, s *Screen) (int, error) {
		s.m.mu.Lock()
		st := s.stack
		s.m.mu.Unlock()
		if st == nil {
			return 0, errUnavailable(s.ID, "is not running")
		}
		return st.launch(ctx, name, argv)
	}
}

// defaultLaunchers is the allow-list of desktop applications. The browser
// package adds "browser" (its Chromium needs the DevTools pipe).
func defaultLaunchers() map[string]Launcher {
	return map[string]Launcher{
		"terminal": argvLauncher("terminal", "xfce4-terminal"),
		"files":    argvLauncher("files", "thunar"),
		"editor":   argvLauncher("editor", "mousepad"),
	}
}

// SetLauncher adds or replaces an allowed application.
func (m *Manager) SetLauncher(app string, l Launcher) {
	m.launchMu.Lock()
	defer m.launchMu.Unlock()
	m.launchers[app] = l
}

// Apps lists the allowed application names.
func (m *Manager) Apps() []string {
	m.launchMu.Lock()
	defer m.launchMu.Unlock()
	out := make([]string, 0, len(m.launchers))
	for k := range m.launchers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (m *Manager) launcher(app string) (Launcher, error) {
	m.launchMu.Lock()
	l := m.launchers[app]
	m.launchMu.Unlock()
	if l == nil {
		return nil, shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "unknown app %q (want one of %s)", app, strings.Join(m.Apps(), ", "))
	}
	return l, nil
}
