package dashboard

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// A run's replay (replay.html): the run's screen recording in a <video>
// beside its tool calls and events on one timeline, each tool call marked
// at its moment; a click on a mark (or an event) seeks the video there.
// The video is streamed from the computer's botd through the worker (the
// page never learns botd's address or token).

// Replay is one run with its recording and events.
type Replay struct {
	Run       Run              `json:"run"`
	Recording *ReplayRecording `json:"recording"`
	// Video is the recording's path below the dashboard ("" without one).
	Video string `json:"video,omitempty"`
}

// ReplayRecording is the run's recording: which screen's, which file, and
// when it started (the video's time 0) and ended.
type ReplayRecording struct {
	Screen     string    `json:"screen"`
	ID         string    `json:"id"`
	State      string    `json:"state"`
	StopReason string    `json:"stopReason,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	EndedAt    time.Time `json:"endedAt,omitempty"`
	Seconds    float64   `json:"seconds,omitempty"`
}

// Replayer, when the Lister implements it, reads one run for its replay
// (all its events but the model's notifications).
type Replayer interface {
	Replay(ctx context.Context, computerID, runID string) (Replay, error)
}

func (d *Dashboard) replayRoutes(m *http.ServeMux, p string, static http.Handler) {
	m.Handle("GET "+p+"/replay", d.page(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = p + "/replay.html"
		static.ServeHTTP(w, r2)
	})))
	m.Handle("GET "+p+"/replay.js", d.page(static))
	m.HandleFunc("GET "+p+"/api/computers/{id}/runs/{run}/replay", d.api(d.handleReplay))
	m.HandleFunc("GET "+p+"/api/computers/{id}/runs/{run}/video", d.api(d.handleReplayVideo))
}

func (d *Dashboard) replay(ctx context.Context, computerID, runID string) (Replay, error) {
	rp, ok := d.o.Lister.(Replayer)
	if !ok {
		return Replay{}, shared.Errorf(http.StatusNotImplemented, shared.CodeUnavailable, "this worker cannot replay runs")
	}
	return rp.Replay(ctx, computerID, runID)
}

func (d *Dashboard) handleReplay(w http.ResponseWriter, r *http.Request, _ string) error {
	cid, rid := r.PathValue("id"), r.PathValue("run")
	rep, err := d.replay(r.Context(), cid, rid)
	if err != nil {
		return err
	}
	if rep.Recording != nil && rep.Recording.ID != "" {
		rep.Video = "api/computers/" + cid + "/runs/" + rid + "/video"
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

func (d *Dashboard) handleReplayVideo(w http.ResponseWriter, r *http.Request, _ string) error {
	cid, rid := r.PathValue("id"), r.PathValue("run")
	rep, err := d.replay(r.Context(), cid, rid)
	if err != nil {
		return err
	}
	if rep.Recording == nil || rep.Recording.ID == "" {
		return shared.Errorf(http.StatusNotFound, shared.CodeRecordingNotFound, "this run was not recorded (start it with record: true)")
	}
	m, err := d.o.Screens.Machine(r.Context(), cid)
	if err != nil {
		return shared.Errorf(http.StatusBadGateway, shared.CodeUnavailable, "the computer is not reachable")
	}
	rec := machines.RecorderOf(m)
	if rec == nil {
		return shared.Errorf(http.StatusNotImplemented, shared.CodeUnavailable, "this computer's machine cannot record its screens")
	}
	if err := machines.ServeRecordingVideo(w, r, rec, rep.Recording.Screen, rep.Recording.ID); err != nil {
		return asAPIError(err)
	}
	return nil
}

// asAPIError keeps botd's answer when it is an API error.
func asAPIError(err error) error {
	var be *client.Error
	if errors.As(err, &be) {
		return shared.Errorf(be.Status, be.Code, "%s", be.Message)
	}
	return err
}
