package runs

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// A run with record: true records its bot's screen from its start to its
// end: botd keeps the file in the computer's portable home
// (desktop/screens/<bot>/recordings/), and the run's "recording" events
// name it, so the run, its API answer and the dashboard's replay find it
// after the run ended.

// EventRecording is the run event a recording's start, end or failure is.
const EventRecording = "recording"

func init() { ownEvents[EventRecording] = true }

// RunRecording is a run's recording as its snapshot shows it.
type RunRecording struct {
	ID         string  `json:"id,omitempty"`
	Screen     string  `json:"screen"`
	State      string  `json:"state"` // recording, stopped, failed
	StartedAt  string  `json:"startedAt,omitempty"`
	EndedAt    string  `json:"endedAt,omitempty"`
	StopReason string  `json:"stopReason,omitempty"`
	Seconds    float64 `json:"seconds,omitempty"`
	Bytes      int64   `json:"bytes,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// canRecord checks the run's screen can be recorded on machine.
func canRecord(ctx context.Context, machine machines.Machine, screen string) error {
	if err := machine.CheckScreen(ctx, screen); err != nil {
		return err
	}
	if machines.RecorderOf(machine) == nil {
		return shared.Errorf(http.StatusNotImplemented, shared.CodeUnavailable, "record: this computer's machine cannot record its screens")
	}
	return nil
}

// recordingFrom folds one recording event into what a snapshot shows.
func recordingFrom(cur *RunRecording, data []byte) *RunRecording {
	var rr RunRecording
	if json.Unmarshal(data, &rr) != nil {
		return cur
	}
	if cur != nil && rr.StartedAt == "" {
		rr.StartedAt = cur.StartedAt
	}
	return &rr
}

// recordingMaxSeconds is the recording's time cap: the run's own.
func (r *Run) recordingMaxSeconds() int {
	secs := int(r.m.o.TurnTimeout/time.Second) + 60
	return min(max(secs, 1), shared.RecordingMaxSecondsCap)
}

// startRecording starts the run's recording; a failure is an event, and
// the run goes on without one.
func (r *Run) startRecording(ctx context.Context) {
	r.mu.Lock()
	machine := r.machine
	r.mu.Unlock()
	rr := RunRecording{Screen: r.botID}
	rec := machines.RecorderOf(machine)
	if rec == nil {
		rr.State, rr.Error = "failed", "this computer's machine cannot record its screens"
	} else if got, err := rec.StartRecording(ctx, r.botID, shared.RecordingStart{MaxSeconds: r.recordingMaxSeconds()}); err != nil {
		rr.State, rr.Error = "failed", recordingError(err)
	} else {
		rr.ID, rr.State, rr.StartedAt = got.ID, got.State, got.StartedAt
	}
	r.mu.Lock()
	r.snap.Recording = &rr
	r.emitLocked(EventRecording, rr)
	r.mu.Unlock()
	if rr.Error != "" {
		r.traced(r.m.o.Log.Warn()).Str("run", r.id).Str("error", rr.Error).Msg("the run's recording did not start")
	}
}

// stopRecording ends the run's recording (one that ended at its cap on
// its own is read back) and records how it ended.
func (r *Run) stopRecording(ctx context.Context) {
	r.mu.Lock()
	cur, machine := r.snap.Recording, r.machine
	r.mu.Unlock()
	if cur == nil || cur.ID == "" || cur.State != shared.RecordingStateRecording {
		return
	}
	rec := machines.RecorderOf(machine)
	if rec == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	got, err := rec.StopRecording(ctx, cur.Screen, cur.ID)
	var be *client.Error
	if errors.As(err, &be) && be.Code == shared.CodeRecordingEnded {
		got, err = rec.Recording(ctx, cur.Screen, cur.ID)
	}
	rr := *cur
	if err != nil {
		rr.State, rr.Error = "failed", recordingError(err)
	} else {
		rr.State, rr.EndedAt, rr.StopReason, rr.Seconds, rr.Bytes, rr.Error = got.State, got.EndedAt, got.StopReason, got.Seconds, got.Bytes, got.Error
	}
	r.mu.Lock()
	r.snap.Recording = &rr
	r.emitLocked(EventRecording, rr)
	r.mu.Unlock()
}

// recordingError is botd's answer when it is one, else a plain line.
func recordingError(err error) string {
	var be *client.Error
	if errors.As(err, &be) {
		return string(be.Code) + ": " + be.Message
	}
	var ae *shared.APIError
	if errors.As(err, &ae) {
		return string(ae.Code) + ": " + ae.Message
	}
	return "the computer did not answer"
}
