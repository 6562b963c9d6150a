package takeover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/dashboard"
	"github.com/open-bot/computer/apps/worker/internal/runs"
	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/pkg/shared"
)

// replayEvents bounds the events a replay shows (a run keeps up to
// runs.MaxRunEvents).
const replayEvents = 2000

// Replay implements dashboard.Replayer: run runID of computerID with every
// recorded event but the model's notifications, and its recording (from
// the run's "recording" events).
func (l *dashLister) Replay(ctx context.Context, computerID, runID string) (dashboard.Replay, error) {
	r, err := l.st.GetRun(ctx, runID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.ComputerID != computerID) {
		return dashboard.Replay{}, shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no such run")
	}
	if err != nil {
		return dashboard.Replay{}, err
	}
	evs, err := l.st.Events(ctx, runID, 0)
	if err != nil {
		return dashboard.Replay{}, err
	}
	out := dashboard.Replay{Run: dashboard.Run{ID: r.ID, BotID: r.BotID, State: r.State, Events: []dashboard.Event{}}}
	for _, e := range evs {
		if e.Type == runs.EventRecording {
			var rr runs.RunRecording
			if json.Unmarshal(e.Data, &rr) == nil && rr.ID != "" {
				rec := &dashboard.ReplayRecording{Screen: rr.Screen, ID: rr.ID, State: rr.State, StopReason: rr.StopReason, Seconds: rr.Seconds}
				rec.StartedAt, _ = time.Parse(time.RFC3339Nano, rr.StartedAt)
				rec.EndedAt, _ = time.Parse(time.RFC3339Nano, rr.EndedAt)
				out.Recording = rec
			}
		}
		if e.Type == "notification" || len(out.Run.Events) >= replayEvents {
			continue
		}
		text := eventText(e.Type, e.Data)
		if e.Type == runs.EventRecording {
			text = recordingText(e.Data)
		}
		out.Run.Events = append(out.Run.Events, dashboard.Event{At: e.At, Kind: e.Type, Text: text})
	}
	return out, nil
}

// recordingText is a recording event's line: its state, file and how it
// ended.
func recordingText(data []byte) string {
	var rr runs.RunRecording
	_ = json.Unmarshal(data, &rr)
	s := rr.State + " " + rr.ID
	if rr.StopReason != "" {
		s += fmt.Sprintf(" (%s, %.1f s, %d bytes)", rr.StopReason, rr.Seconds, rr.Bytes)
	}
	if rr.Error != "" {
		s += ": " + rr.Error
	}
	return s
}
