package main

// Red-team rows of issue 36, row 5: one reply from a hostile machine must not
// exhaust the worker. The position is a machine: a compromised computer
// whose botd answers the worker's calls as it likes. Here that botd is a
// loopback server speaking botd's API (/health, /exec, /screens), attached
// to the worker as Team t2's computer like any other botd; Team t1's
// computer is a real botd. Each row is one hostile answer:
//
//   - a shell call answered with a 2 GiB stdout, streamed: the worker's call
//     fails with reply_too_large naming the cap, its heap grows by a bounded
//     amount, and the hostile botd could not push the 2 GiB (the worker
//     closed the connection rather than drain it);
//   - the dashboard's state call while /screens streams 400 MiB, or sends
//     its headers and then nothing: t1's state arrives while the hostile
//     botd is still at it, and t2's part is marked unavailable.
//
// The test caps itself: when the worker's heap has grown by more than
// abortGrowth the hostile botd stops, so an unfixed worker fails the row
// instead of eating the machine. No timing assertion but a generous
// deadline on the state call.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/mockmodel"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

const (
	// replyDisplayBase is this test's X display (t1's real botd).
	replyDisplayBase = 1610
	// abortGrowth: the hostile botd stops once the worker's heap has grown
	// by this much (the unfixed worker would otherwise take GiBs).
	abortGrowth = 400 << 20
	// replyHeapBound is what a row may grow the worker's heap by.
	replyHeapBound = 96 << 20
)

// replyBotd is Team t2's compromised botd.
type replyBotd struct {
	// screens is how /screens answers: "huge" streams 400 MiB, "silent"
	// sends headers and then nothing; "" answers an empty list.
	screens atomic.Value
	// mu guards abort and cut. abort is closed by the heap watch (stop):
	// every streaming answer stops at once.
	mu    sync.Mutex
	abort chan struct{}
	// done is closed at the test's end.
	done chan struct{}
	// sent counts the bytes of the current streaming answer; finished is
	// true once it was sent whole (or its silence ended).
	sent     atomic.Int64
	finished atomic.Bool
	// cut is the write error that ended the stream early (the worker
	// closed the connection), "" if none.
	cut string
}

// stop ends the current row's streams.
func (h *replyBotd) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.abort:
	default:
		close(h.abort)
	}
}

// aborted is the current row's abort channel.
func (h *replyBotd) aborted() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.abort
}

// reset starts a row: /screens answers as screens says.
func (h *replyBotd) reset(screens string) {
	h.screens.Store(screens)
	h.sent.Store(0)
	h.finished.Store(false)
	h.mu.Lock()
	h.abort = make(chan struct{})
	h.cut = ""
	h.mu.Unlock()
}

func (h *replyBotd) setCut(err error) {
	h.mu.Lock()
	h.cut = err.Error()
	h.mu.Unlock()
}

func (h *replyBotd) cutErr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cut
}

func (h *replyBotd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/health":
		_, _ = io.WriteString(w, `{"ok":true,"agent":"running","screens":[]}`)
	case r.Method == http.MethodPost && r.URL.Path == "/exec":
		var req client.ExecRequest
		_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req)
		if len(req.Argv) > 0 && req.Argv[0] == "hostile-flood" {
			h.stream(w, r, `{"exitCode":0,"stdout":"`, 2<<30, `","stderr":"","truncated":false}`)
			return
		}
		_, _ = io.WriteString(w, `{"exitCode":0,"stdout":"","stderr":""}`)
	case r.Method == http.MethodGet && r.URL.Path == "/screens":
		switch h.screens.Load() {
		case "huge":
			h.stream(w, r, `{"screens":[{"id":"`, 400<<20, `","state":"running"}]}`)
		case "silent":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done(): // the worker gave up: the silence goes on
				h.setCut(r.Context().Err())
			case <-h.aborted():
			case <-h.done:
			}
		default:
			_, _ = io.WriteString(w, `{"screens":[]}`)
		}
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"no such route"}}`)
	}
}

// stream answers head, n bytes of 'A' in 1 MiB writes (never held in
// memory), then tail; it stops when the worker closes the connection or the
// test aborts.
func (h *replyBotd) stream(w http.ResponseWriter, r *http.Request, head string, n int64, tail string) {
	chunk := []byte(strings.Repeat("A", 1<<20))
	abort := h.aborted()
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, head)
	for h.sent.Load() < n {
		select {
		case <-abort:
			panic(http.ErrAbortHandler) // drop the connection mid-answer
		case <-h.done:
			panic(http.ErrAbortHandler)
		case <-r.Context().Done():
			h.setCut(r.Context().Err())
			return
		default:
		}
		k, err := w.Write(chunk)
		h.sent.Add(int64(k))
		if err != nil {
			h.setCut(err)
			return
		}
	}
	_, _ = io.WriteString(w, tail)
	h.finished.Store(true)
}

// heapWatch samples the worker's heap (this process's) until stopped and
// calls over once it has grown by more than abortGrowth.
type heapWatch struct {
	before uint64
	peak   atomic.Uint64
	stopC  chan struct{}
	wg     sync.WaitGroup
}

func watchHeap(over func()) *heapWatch {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	hw := &heapWatch{before: ms.HeapAlloc, stopC: make(chan struct{})}
	hw.peak.Store(ms.HeapAlloc)
	hw.wg.Add(1)
	go func() {
		defer hw.wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > hw.peak.Load() {
				hw.peak.Store(ms.HeapAlloc)
			}
			if ms.HeapAlloc > hw.before+abortGrowth {
				over()
			}
			select {
			case <-hw.stopC:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return hw
}

// growth stops the watch and returns the heap's peak growth.
func (hw *heapWatch) growth() int64 {
	close(hw.stopC)
	hw.wg.Wait()
	return max(int64(hw.peak.Load())-int64(hw.before), 0)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func TestRedTeamMachineReply(t *testing.T) {
	model := mockmodel.New(func([]mockmodel.Output) mockmodel.Step { return mockmodel.Step{Message: "done"} })
	modelSrv := httptest.NewServer(model.RequireKey(scriptedKey))
	t.Cleanup(modelSrv.Close)
	c := startComputer(t, modelSrv.URL, replyDisplayBase)
	friendly := startWorker(t, c, "alice")

	hb := &replyBotd{done: make(chan struct{})}
	hb.reset("")
	hostileSrv := httptest.NewServer(hb)
	t.Cleanup(hostileSrv.Close)
	t.Cleanup(func() { close(hb.done) }) // runs before hostileSrv.Close
	hostile := friendly.addComputer(t, &computer{url: hostileSrv.URL, token: "hostile-token-0123456789"}, map[string]any{"team": "t2"}, "mallory")

	link, err := friendly.w.People.LoginLink(friendly.url)
	require.NoError(t, err)
	jar, _ := cookiejar.New(nil)
	dash := &http.Client{Jar: jar, Timeout: 45 * time.Second}
	resp, err := dash.Get(link)
	require.NoError(t, err)
	resp.Body.Close()

	t.Run("shell answered with a 2 GiB stdout", func(t *testing.T) {
		hb.reset("")
		hw := watchHeap(hb.stop)
		body := `{"botId":"mallory","args":{"argv":["hostile-flood"]}}`
		req, _ := http.NewRequest(http.MethodPost, hostile.url+"/v1/computers/"+hostile.computer+"/tools/shell", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+hostile.token)
		req.Header.Set("X-Computer-Capability", hostile.capa)
		req.Header.Set("Content-Type", "application/json")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		require.NoError(t, err)
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		grew := hw.growth()
		hb.stop()
		var res struct {
			Success bool `json:"success"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		_ = json.Unmarshal(raw, &res)
		msg := ""
		if len(res.Content) > 0 {
			msg = res.Content[0].Text
		}
		t.Logf("the tool call answered %d %q; the hostile botd sent %s (whole: %v, cut: %q); the worker's heap grew by %s at its peak",
			resp.StatusCode, msg, mib(hb.sent.Load()), hb.finished.Load(), hb.cutErr(), mib(grew))
		assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
		assert.Contains(t, msg, "error: "+string(shared.CodeReplyTooLarge)+": ", "the call fails with the cap's code")
		assert.Contains(t, msg, "16 MiB", "the error names the cap")
		assert.Less(t, grew, int64(replyHeapBound), "the worker's heap stays bounded")
		assert.Less(t, hb.sent.Load(), int64(256<<20), "the worker closed the connection instead of draining 2 GiB")
		assert.False(t, hb.finished.Load())
	})

	for _, mode := range []string{"huge", "silent"} {
		name := map[string]string{"huge": "dashboard state while /screens streams 400 MiB", "silent": "dashboard state while /screens never answers"}[mode]
		t.Run(name, func(t *testing.T) {
			hb.reset(mode)
			hw := watchHeap(hb.stop)
			growth := sync.OnceValue(hw.growth)
			defer func() { growth(); hb.stop() }()
			resp, err := dash.Get(friendly.url + "/dashboard/api/state")
			// Ordering, not timing: was the hostile botd still at it when
			// the state arrived?
			stillAt := !hb.finished.Load()
			require.NoError(t, err, "the dashboard's state call answers within 45 s (the hostile botd sent %s; heap +%s)", mib(hb.sent.Load()), mib(growth()))
			raw, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
			resp.Body.Close()
			grew := growth()
			require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
			var st struct {
				Computers []struct {
					ID    string `json:"id"`
					Error string `json:"error"`
					Bots  []struct {
						ID          string `json:"id"`
						ScreenState string `json:"screenState"`
					} `json:"bots"`
				} `json:"computers"`
			}
			require.NoError(t, json.Unmarshal(raw, &st))
			parts := map[string]string{}
			for _, cs := range st.Computers {
				var states []string
				for _, b := range cs.Bots {
					states = append(states, b.ID+"="+b.ScreenState)
				}
				parts[cs.ID] = fmt.Sprintf("error %q bots %v", cs.Error, states)
			}
			t.Logf("%s: the state arrived with the hostile botd still at it: %v (it sent %s); t1: %s; t2: %s; heap +%s",
				name, stillAt, mib(hb.sent.Load()), parts[friendly.computer], parts[hostile.computer], mib(grew))
			assert.True(t, stillAt, "t1's state does not wait for t2's machine")
			var t1ok, t2marked bool
			for _, cs := range st.Computers {
				switch cs.ID {
				case friendly.computer:
					t1ok = cs.Error == "" && len(cs.Bots) == 1 && cs.Bots[0].ScreenState != "unavailable"
				case hostile.computer:
					t2marked = cs.Error != ""
					if len(cs.Bots) > 0 {
						t2marked = true
						for _, b := range cs.Bots {
							t2marked = t2marked && b.ScreenState == "unavailable"
						}
					}
				}
			}
			assert.True(t, t1ok, "t1's part is whole")
			assert.True(t, t2marked, "t2's part is marked unavailable")
			assert.Less(t, grew, int64(replyHeapBound), "the worker's heap stays bounded")
		})
	}
}
