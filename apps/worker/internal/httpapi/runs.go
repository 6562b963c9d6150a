package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/pkg/shared"
)

func (a *api) startRun(w http.ResponseWriter, r *http.Request) {
	var req runs.StartRequest
	if !decode(w, r, &req) {
		return
	}
	run, err := a.o.Runs.Start(r.Context(), r.PathValue("id"), req)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"run": run.Snapshot()})
}

func (a *api) getRun(w http.ResponseWriter, r *http.Request) {
	snap, _, err := a.o.Runs.Get(r.Context(), r.PathValue("id"), r.PathValue("run"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run": snap})
}

func (a *api) stopRun(w http.ResponseWriter, r *http.Request) {
	snap, run, err := a.o.Runs.Get(r.Context(), r.PathValue("id"), r.PathValue("run"))
	if err != nil {
		fail(w, err)
		return
	}
	if run == nil {
		if !snap.Status.Ended() {
			writeErr(w, http.StatusConflict, shared.CodeConflict, "the run is not live in this worker")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"run": snap})
		return
	}
	run.Stop()
	select {
	case <-run.Done():
	case <-time.After(15 * time.Second):
	}
	writeJSON(w, http.StatusOK, map[string]any{"run": run.Snapshot()})
}

func (a *api) resumeRun(w http.ResponseWriter, r *http.Request) {
	_, run, err := a.o.Runs.Get(r.Context(), r.PathValue("id"), r.PathValue("run"))
	if err != nil {
		fail(w, err)
		return
	}
	if run == nil {
		writeErr(w, http.StatusConflict, shared.CodeConflict, "the run is not waiting for a takeover")
		return
	}
	if err := run.Resume(); err != nil {
		writeErr(w, http.StatusConflict, shared.CodeConflict, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run": run.Snapshot()})
}

// events streams the run's events as server-sent events, history first,
// then an "end" event carrying the final run.
func (a *api) events(w http.ResponseWriter, r *http.Request) {
	cid, rid := r.PathValue("id"), r.PathValue("run")
	snap, run, err := a.o.Runs.Get(r.Context(), cid, rid)
	if err != nil {
		fail(w, err)
		return
	}
	var ch <-chan runs.Event
	cancel := func() {}
	if run != nil {
		ch, cancel = run.Subscribe()
	} else {
		evs, err := a.o.Runs.StoredEvents(r.Context(), rid)
		if err != nil {
			fail(w, err)
			return
		}
		c := make(chan runs.Event, len(evs))
		for _, e := range evs {
			c <- e
		}
		close(c)
		ch = c
	}
	defer cancel()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepalive.C:
			_, _ = fmt.Fprint(w, ": keepalive\n\n")
			_ = rc.Flush()
		case e, ok := <-ch:
			if !ok {
				if run != nil {
					<-run.Done()
					if s, _, err := a.o.Runs.Get(r.Context(), cid, rid); err == nil {
						snap = s
					} else {
						snap = run.Snapshot()
					}
				}
				b, _ := json.Marshal(snap)
				_, _ = fmt.Fprintf(w, "event: end\ndata: %s\n\n", b)
				_ = rc.Flush()
				return
			}
			b, _ := json.Marshal(e)
			_, _ = fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, b)
			_ = rc.Flush()
		}
	}
}
