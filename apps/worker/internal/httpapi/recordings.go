package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/open-bot/computer/apps/worker/internal/computers"
	"github.com/open-bot/computer/apps/worker/internal/machines"
	"github.com/open-bot/computer/pkg/shared"
	"github.com/open-bot/computer/pkg/shared/client"
)

// MountRecordings adds a bot's screen recordings (botd records the
// screen to an H.264 MP4 kept in the computer's portable home):
//
//	POST   /v1/computers/{id}/bots/{bot}/recordings              start {fps?, maxSeconds?, maxBytes?}
//	GET    /v1/computers/{id}/bots/{bot}/recordings              list
//	GET    /v1/computers/{id}/bots/{bot}/recordings/{rec}        one
//	POST   /v1/computers/{id}/bots/{bot}/recordings/{rec}/stop   stop
//	GET    /v1/computers/{id}/bots/{bot}/recordings/{rec}/video  the file (Range answered)
//	DELETE /v1/computers/{id}/bots/{bot}/recordings/{rec}        delete
func MountRecordings(mux *http.ServeMux, gate func(http.HandlerFunc) http.HandlerFunc, comps *computers.Service) {
	p := "/v1/computers/{id}/bots/{bot}/recordings"
	mux.HandleFunc("POST "+p, gate(func(w http.ResponseWriter, r *http.Request) {
		var req shared.RecordingStart
		if !decode(w, r, &req) {
			return
		}
		req.LeaseID = "" // a recording watches; it never takes the bot's lease
		rec, screen, err := recorderFor(r.Context(), comps, r)
		if err == nil {
			var out shared.Recording
			if out, err = rec.StartRecording(r.Context(), screen, req); err == nil {
				writeJSON(w, http.StatusOK, out)
				return
			}
		}
		fail(w, fromBotd(err))
	}))
	mux.HandleFunc("GET "+p, gate(func(w http.ResponseWriter, r *http.Request) {
		rec, screen, err := recorderFor(r.Context(), comps, r)
		if err == nil {
			var out []shared.Recording
			if out, err = rec.Recordings(r.Context(), screen); err == nil {
				writeJSON(w, http.StatusOK, shared.Recordings{Recordings: out})
				return
			}
		}
		fail(w, fromBotd(err))
	}))
	mux.HandleFunc("GET "+p+"/{rec}", gate(func(w http.ResponseWriter, r *http.Request) {
		rec, screen, err := recorderFor(r.Context(), comps, r)
		if err == nil {
			var out shared.Recording
			if out, err = rec.Recording(r.Context(), screen, r.PathValue("rec")); err == nil {
				writeJSON(w, http.StatusOK, out)
				return
			}
		}
		fail(w, fromBotd(err))
	}))
	mux.HandleFunc("POST "+p+"/{rec}/stop", gate(func(w http.ResponseWriter, r *http.Request) {
		rec, screen, err := recorderFor(r.Context(), comps, r)
		if err == nil {
			var out shared.Recording
			if out, err = rec.StopRecording(r.Context(), screen, r.PathValue("rec")); err == nil {
				writeJSON(w, http.StatusOK, out)
				return
			}
		}
		fail(w, fromBotd(err))
	}))
	mux.HandleFunc("GET "+p+"/{rec}/video", gate(func(w http.ResponseWriter, r *http.Request) {
		rec, screen, err := recorderFor(r.Context(), comps, r)
		if err == nil {
			err = machines.ServeRecordingVideo(w, r, rec, screen, r.PathValue("rec"))
		}
		if err != nil {
			fail(w, fromBotd(err))
		}
	}))
	mux.HandleFunc("DELETE "+p+"/{rec}", gate(func(w http.ResponseWriter, r *http.Request) {
		rec, screen, err := recorderFor(r.Context(), comps, r)
		if err == nil {
			if err = rec.DeleteRecording(r.Context(), screen, r.PathValue("rec")); err == nil {
				writeJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("rec"), "deleted": true})
				return
			}
		}
		fail(w, fromBotd(err))
	}))
}

// recorderFor resolves the route's bot to its machine's recorder and the
// bot's screen (its id).
func recorderFor(ctx context.Context, comps *computers.Service, r *http.Request) (machines.Recorder, string, error) {
	id, bot := r.PathValue("id"), r.PathValue("bot")
	if _, err := comps.HasBot(ctx, id, bot); err != nil {
		return nil, "", err
	}
	m, err := comps.Machine(ctx, id)
	if err != nil {
		return nil, "", err
	}
	if err := m.CheckScreen(ctx, bot); err != nil {
		return nil, "", err
	}
	rec := machines.RecorderOf(m)
	if rec == nil {
		return nil, "", shared.Errorf(http.StatusNotImplemented, shared.CodeUnavailable, "this computer's machine cannot record its screens")
	}
	return rec, bot, nil
}

// fromBotd keeps botd's answer when it is an API error (its code and
// message are meant for callers).
func fromBotd(err error) error {
	var be *client.Error
	if errors.As(err, &be) {
		return shared.Errorf(be.Status, be.Code, "%s", be.Message)
	}
	return err
}
