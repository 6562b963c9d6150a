package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// WorkspaceSummary counts what a workspace export or import carried.
type WorkspaceSummary struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Links    int   `json:"links"`
	Bytes    int64 `json:"bytes"`
	Skipped  int   `json:"skipped"`
}

// ErrExportIncomplete: the export stream ended without botd's closing
// trailers, so it is not a whole workspace.
var ErrExportIncomplete = errors.New("workspace export ended before botd finished it")

// ExportWorkspace is GET /workspace/export: the portable home as a tar
// stream. The reader returns ErrExportIncomplete instead of io.EOF when the
// stream lacks botd's completion trailers (an export that failed midway is
// never mistaken for a short whole one). The caller closes it.
func (c *Client) ExportWorkspace(ctx context.Context) (io.ReadCloser, error) {
	return c.ExportWorkspaceMax(ctx, 0)
}

// ErrExportRefused: botd stopped the export at a limit (the caller's
// maxBytes, or more than an import accepts) and said why.
var ErrExportRefused = errors.New("botd refused the workspace export")

// ExportWorkspaceMax is ExportWorkspace asking botd to stop rather than send
// more than maxBytes (0: botd's own limit, what its import accepts). An
// export that would exceed it fails: 413 payload_too_large before any byte,
// or a reader that returns ErrExportRefused with botd's reason. botd is not
// trusted to keep it: the caller still counts what it reads.
func (c *Client) ExportWorkspaceMax(ctx context.Context, maxBytes int64) (io.ReadCloser, error) {
	q := url.Values{}
	if maxBytes > 0 {
		q.Set("maxBytes", strconv.FormatInt(maxBytes, 10))
	}
	if exportRecordings(ctx) {
		q.Set("recordings", "1")
	}
	p := "/workspace/export"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	sctx, idl := newIdle(ctx, streamIdle)
	resp, err := c.raw(sctx, http.MethodGet, p, nil, "")
	if err != nil {
		idl.stop()
		return nil, idl.err(http.MethodGet, p, err)
	}
	resp.Body = &streamBody{rc: resp.Body, i: idl, method: http.MethodGet, path: p}
	return &exportBody{resp: resp}, nil
}

type exportBody struct {
	resp *http.Response
}

func (e *exportBody) Read(p []byte) (int, error) {
	n, err := e.resp.Body.Read(p)
	if err == io.EOF && e.resp.Trailer.Get("X-Export-Files") == "" {
		if why := e.resp.Trailer.Get("X-Export-Error"); why != "" {
			if len(why) > 512 {
				why = why[:512] + "…"
			}
			return n, fmt.Errorf("%w: %s", ErrExportRefused, why)
		}
		return n, ErrExportIncomplete
	}
	return n, err
}

func (e *exportBody) Close() error { return e.resp.Body.Close() }

// ImportWorkspace is PUT /workspace/import: it streams r (a tar from
// ExportWorkspace) into the portable home. The call fails once no byte
// moved for StreamIdle; botd's summary is read under MaxReply.
func (c *Client) ImportWorkspace(ctx context.Context, r io.Reader) (WorkspaceSummary, error) {
	const p = "/workspace/import"
	var sum WorkspaceSummary
	sctx, idl := newIdle(ctx, streamIdle)
	defer idl.stop()
	resp, err := c.raw(sctx, http.MethodPut, p, idleReader{r: r, i: idl}, "application/x-tar")
	if err != nil {
		return sum, idl.err(http.MethodPut, p, err)
	}
	defer resp.Body.Close()
	cr := &capReader{r: idleReader{r: resp.Body, i: idl}, max: MaxReply}
	if err := json.NewDecoder(cr).Decode(&sum); err != nil {
		if cr.n > MaxReply {
			return sum, tooLarge(http.MethodPut, p, small)
		}
		return sum, idl.err(http.MethodPut, p, fmt.Errorf("botd PUT %s: decode reply: %w", p, err))
	}
	return sum, nil
}

type exportRecordingsKey struct{}

// WithExportRecordings marks ctx so an export through it carries the
// screens' recordings too (botd leaves them out unless asked).
func WithExportRecordings(ctx context.Context) context.Context {
	return context.WithValue(ctx, exportRecordingsKey{}, true)
}

func exportRecordings(ctx context.Context) bool {
	v, _ := ctx.Value(exportRecordingsKey{}).(bool)
	return v
}
