package machines

import (
	"context"
	"io"
	"mime"
	"net/http"

	"github.com/open-bot/computer/pkg/shared"
)

// Recorder is what a machine that can record its screens answers besides
// Machine (botd's /screens/{id}/recordings). A machine without it cannot
// record: callers answer 501 unavailable.
type Recorder interface {
	StartRecording(ctx context.Context, screen string, in shared.RecordingStart) (shared.Recording, error)
	StopRecording(ctx context.Context, screen, id string) (shared.Recording, error)
	Recordings(ctx context.Context, screen string) ([]shared.Recording, error)
	Recording(ctx context.Context, screen, id string) (shared.Recording, error)
	DeleteRecording(ctx context.Context, screen, id string) error
	// RecordingVideo is the file's response (200, or 206 for rangeHeader);
	// the caller closes its body.
	RecordingVideo(ctx context.Context, screen, id, rangeHeader string) (*http.Response, error)
}

// RecorderOf is m's Recorder, or nil when it cannot record.
func RecorderOf(m Machine) Recorder {
	if r, ok := m.(Recorder); ok {
		return r
	}
	if u, ok := m.(interface{ Unwrap() Machine }); ok {
		return RecorderOf(u.Unwrap())
	}
	return nil
}

// StartRecording implements Recorder.
func (b *Botd) StartRecording(ctx context.Context, screen string, in shared.RecordingStart) (shared.Recording, error) {
	return b.c.StartRecording(ctx, screen, in)
}

// StopRecording implements Recorder.
func (b *Botd) StopRecording(ctx context.Context, screen, id string) (shared.Recording, error) {
	return b.c.StopRecording(ctx, screen, id)
}

// Recordings implements Recorder.
func (b *Botd) Recordings(ctx context.Context, screen string) ([]shared.Recording, error) {
	return b.c.Recordings(ctx, screen)
}

// Recording implements Recorder.
func (b *Botd) Recording(ctx context.Context, screen, id string) (shared.Recording, error) {
	return b.c.Recording(ctx, screen, id)
}

// DeleteRecording implements Recorder.
func (b *Botd) DeleteRecording(ctx context.Context, screen, id string) error {
	return b.c.DeleteRecording(ctx, screen, id)
}

// RecordingVideo implements Recorder.
func (b *Botd) RecordingVideo(ctx context.Context, screen, id, rangeHeader string) (*http.Response, error) {
	return b.c.RecordingVideo(ctx, screen, id, rangeHeader)
}

// ServeRecordingVideo streams recording id of screen to w (a Range
// request answered with botd's 206). An error before any byte was written
// is returned for the caller to answer; once streaming, nil. The machine
// is the bots' and may say anything, so only the byte-range headers are
// its: the type is the recording format the worker knows
// (shared.RecordingMediaType) with nosniff, and the disposition the
// worker's own, so no page a machine serves runs on the worker's origin.
func ServeRecordingVideo(w http.ResponseWriter, r *http.Request, rec Recorder, screen, id string) error {
	resp, err := rec.RecordingVideo(r.Context(), screen, id, r.Header.Get("Range"))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Length", "Content-Range", "Accept-Ranges", "Last-Modified"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.Header().Set("Content-Type", shared.RecordingMediaType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	cd := mime.FormatMediaType("attachment", map[string]string{"filename": id + ".mp4"})
	if cd == "" {
		cd = "attachment"
	}
	w.Header().Set("Content-Disposition", cd)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	return nil
}
