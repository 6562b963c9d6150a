package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared/client"
)

// Displays and view ports of this test's botd: no other test uses them.
const (
	qDisplayBase  = 700
	qViewPortBase = 18200
)

// qcall is an authorized request to d.
func qcall(d *daemon, method, path string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+d.addr+path, rd)
	req.Header.Set("Authorization", "Bearer "+d.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// chromiumPid is the main Chromium process using profile dir (0: none).
func chromiumPid(profile string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := string(b)
		if strings.Contains(cmd, "--user-data-dir="+profile) && !strings.Contains(cmd, "--type=") {
			return pid
		}
	}
	return 0
}

// readLoop is one bot calling read-page over and over, as the worker's
// browser_read_page does.
type readLoop struct {
	screen, url string
	mu          sync.Mutex
	calls       int
	during      int // calls that overlapped the export
	fails       []string
	longest     time.Duration
	pids        []int
}

// TestExportQuiescesOneBrowserAtATime: a workspace export (what every run's
// end does today) never disturbs another bot. Two bots browse on their own
// screens and call read-page in a loop while the export runs: none of the
// calls fails (a call meeting its quiesced browser waits for it), each
// browser is quiesced alone, one after the other, and the archive carries
// both profiles.
func TestExportQuiescesOneBrowserAtATime(t *testing.T) {
	testenv.RequireTools(t, "Xvfb", "x11vnc", "chromium", "xdpyinfo")
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<title>%s</title><p>the page of %s</p>", r.URL.Path, r.URL.Path)
	}))
	t.Cleanup(page.Close)
	home := tempHome(t)
	d := startDaemon(t, home, randomKey("quiesce-token-"),
		"DISPLAY_BASE="+strconv.Itoa(qDisplayBase), "VIEW_PORT_BASE="+strconv.Itoa(qViewPortBase),
		"EGRESS_ALLOW="+strings.TrimPrefix(page.URL, "http://"), "MAX_SCREENS=4")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("botd logs:\n%s", tailLines(d.logs(), 120))
		}
	})
	d.waitHealthy(90 * time.Second)

	// Some workspace for the export to copy with the browsers running.
	require.NoError(t, os.WriteFile(filepath.Join(home, "bot", "data.bin"), bytes.Repeat([]byte("x"), 32<<20), 0o644))

	loops := []*readLoop{{screen: "qa", url: page.URL + "/bot-a"}, {screen: "qb", url: page.URL + "/bot-b"}}
	for _, l := range loops {
		st, body := qcall(d, "POST", "/screens/"+l.screen+"/start", nil)
		require.Equal(t, http.StatusOK, st, string(body))
		st, body = qcall(d, "POST", "/screens/"+l.screen+"/lease", map[string]any{"kind": "agent", "holder": "bot-" + l.screen})
		require.Equal(t, http.StatusOK, st, string(body))
		var lease struct {
			LeaseID string `json:"leaseId"`
		}
		require.NoError(t, json.Unmarshal(body, &lease))
		st, body = qcall(d, "POST", "/screens/"+l.screen+"/open", map[string]any{"leaseId": lease.LeaseID, "target": l.url})
		require.Equal(t, http.StatusOK, st, string(body))
	}
	c := client.New("http://"+d.addr, d.token, nil)
	for _, l := range loops {
		deadline := time.Now().Add(30 * time.Second)
		for {
			p, err := c.ReadPage(context.Background(), l.screen)
			if err == nil && p.URL == l.url {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s never showed %s: %+v %v", l.screen, l.url, p, err)
			time.Sleep(200 * time.Millisecond)
		}
	}

	var exportState struct {
		sync.Mutex
		running bool
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, l := range loops {
		profile := filepath.Join(home, "desktop", "screens", l.screen, "chromium")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				exportState.Lock()
				before := exportState.running
				exportState.Unlock()
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
				p, err := c.ReadPage(ctx, l.screen)
				cancel()
				took := time.Since(start)
				exportState.Lock()
				overlapped := before || exportState.running
				exportState.Unlock()
				pid := chromiumPid(profile)
				l.mu.Lock()
				l.calls++
				if overlapped {
					l.during++
				}
				if err != nil {
					l.fails = append(l.fails, fmt.Sprintf("%s after %v: %v", l.screen, took.Round(time.Millisecond), err))
				} else if p.URL == "" {
					l.fails = append(l.fails, fmt.Sprintf("%s: an empty page %+v", l.screen, p))
				}
				if took > l.longest {
					l.longest = took
				}
				if pid != 0 && (len(l.pids) == 0 || l.pids[len(l.pids)-1] != pid) {
					l.pids = append(l.pids, pid)
				}
				l.mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	// Let the loops run before the export starts.
	time.Sleep(time.Second)

	exportState.Lock()
	exportState.running = true
	exportState.Unlock()
	req, _ := http.NewRequest("GET", "http://"+d.addr+"/workspace/export", nil)
	req.Header.Set("Authorization", "Bearer "+d.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	arch, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	exportState.Lock()
	exportState.running = false
	exportState.Unlock()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(arch))
	require.NotEmpty(t, resp.Trailer.Get("X-Export-Files"), "a whole archive")

	// The loops go on until each has read its own page again after the
	// export (the browser it lost for its profile's copy is back, its tab
	// restored).
	for _, l := range loops {
		deadline := time.Now().Add(60 * time.Second)
		for {
			p, err := c.ReadPage(context.Background(), l.screen)
			if err == nil && p.URL == l.url {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s's tab never came back: %+v %v", l.screen, p, err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()

	for _, l := range loops {
		l.mu.Lock()
		t.Logf("bot %s: %d read-page calls, %d during the export, longest %v, chromium pids %v",
			l.screen, l.calls, l.during, l.longest.Round(time.Millisecond), l.pids)
		require.Empty(t, l.fails, "bot %s's browser calls failed during the export", l.screen)
		require.Positive(t, l.during, "bot %s made no call while the export ran", l.screen)
		require.LessOrEqual(t, len(l.pids), 2, "bot %s's Chromium restarted more than once", l.screen)
		l.mu.Unlock()
	}

	// Each browser was quiesced alone: qa back before qb went.
	type ev struct{ msg, screen string }
	var evs []ev
	for _, line := range strings.Split(d.logs(), "\n") {
		var e struct {
			Message string `json:"message"`
			Screen  string `json:"screen"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && (e.Message == "browser quiesced" || e.Message == "browser resumed") {
			evs = append(evs, ev{e.Message, e.Screen})
		}
	}
	want := []ev{{"browser quiesced", "qa"}, {"browser resumed", "qa"}, {"browser quiesced", "qb"}, {"browser resumed", "qb"}}
	require.Equal(t, want, evs, "one browser at a time, each only for its profile's copy")

	// The archive carries the workspace and both profiles.
	names := map[string]bool{}
	tr := tar.NewReader(bytes.NewReader(arch))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		names[h.Name] = true
	}
	require.True(t, names["bot/data.bin"], "workspace file in the archive")
	for _, l := range loops {
		require.True(t, names["desktop/screens/"+l.screen+"/chromium/Default/Preferences"], "%s's profile in the archive", l.screen)
	}
}
