package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/open-bot/computer/pkg/shared"
)

// StartRecording is POST /screens/{id}/recordings.
func (c *Client) StartRecording(ctx context.Context, id string, in shared.RecordingStart) (shared.Recording, error) {
	var r shared.Recording
	return r, c.do(ctx, screenCall, http.MethodPost, "/screens/"+esc(id)+"/recordings", in, &r)
}

// StopRecording is POST /screens/{id}/recordings/{rid}/stop.
func (c *Client) StopRecording(ctx context.Context, id, rid string) (shared.Recording, error) {
	var r shared.Recording
	return r, c.do(ctx, screenCall, http.MethodPost, "/screens/"+esc(id)+"/recordings/"+esc(rid)+"/stop", struct{}{}, &r)
}

// Recordings is GET /screens/{id}/recordings.
func (c *Client) Recordings(ctx context.Context, id string) ([]shared.Recording, error) {
	var r shared.Recordings
	if err := c.Do(ctx, http.MethodGet, "/screens/"+esc(id)+"/recordings", nil, &r); err != nil {
		return nil, err
	}
	return r.Recordings, nil
}

// Recording is GET /screens/{id}/recordings/{rid}.
func (c *Client) Recording(ctx context.Context, id, rid string) (shared.Recording, error) {
	var r shared.Recording
	return r, c.Do(ctx, http.MethodGet, "/screens/"+esc(id)+"/recordings/"+esc(rid), nil, &r)
}

// DeleteRecording is DELETE /screens/{id}/recordings/{rid}.
func (c *Client) DeleteRecording(ctx context.Context, id, rid string) error {
	return c.Do(ctx, http.MethodDelete, "/screens/"+esc(id)+"/recordings/"+esc(rid), nil, nil)
}

// RecordingVideo is GET /screens/{id}/recordings/{rid}/video: botd's
// answer (200, or 206 for a rangeHeader) for the caller to stream on; a
// botd error is a *Error. The stream fails once no byte moved for
// StreamIdle; the caller closes its body.
func (c *Client) RecordingVideo(parent context.Context, id, rid, rangeHeader string) (*http.Response, error) {
	p := "/screens/" + esc(id) + "/recordings/" + esc(rid) + "/video"
	ctx, idl := newIdle(parent, streamIdle)
	resp, err := c.recordingVideo(ctx, p, rangeHeader)
	if err != nil {
		idl.stop()
		return nil, idl.err(http.MethodGet, p, err)
	}
	resp.Body = &streamBody{rc: resp.Body, i: idl, method: http.MethodGet, path: p}
	return resp, nil
}

func (c *Client) recordingVideo(ctx context.Context, p, rangeHeader string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+p, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if rangeHeader != "" {
		req.Header.Set("Range", rangeHeader)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("botd GET %s: %w", p, scrub(err, c.token))
	}
	if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusRequestedRangeNotSatisfiable {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorReply))
	var env shared.ErrorEnvelope
	if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
		return nil, &Error{Status: resp.StatusCode, Code: env.Error.Code, Message: env.Error.Message}
	}
	return nil, &Error{Status: resp.StatusCode, Code: shared.CodeInternal, Message: strings.TrimSpace(string(b))}
}
