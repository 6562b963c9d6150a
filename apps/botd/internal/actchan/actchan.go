// Package actchan is the act channel of an evaluation screen's commands
// (issue 34, OSWorld): OSWorld sends Python that calls pyautogui to its
// guest's /execute. botd runs it as the bot with a socket to itself as fd 3
// (OPENBOT_ACT_FD) and PYTHONPATH at the pyautogui and pyperclip of this
// package (python/), which turn each call into a request on the channel.
// botd runs each request as an ordered act under the screen's lease — the
// same settle, the same lease checks, a person's takeover refusing it — so
// the code never reaches the X display itself.
//
// The protocol is JSON lines, one request then one reply:
//
//	{"act": [action, ...]}       → {"ok": true} | {"ok": false, "code", "error"}
//	{"query": "pointer"}         → {"ok": true, "x", "y"}
//	{"query": "size"}            → {"ok": true, "width", "height"}
//	{"query": "clipboard"}       → {"ok": true, "text"}
//	{"clipboard": "text"}        → {"ok": true}
//
// Actions are the act route's (shared.Action). A request is at most
// MaxRequest bytes; a connection makes one request at a time.
package actchan

import (
	"bufio"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/open-bot/computer/pkg/shared"
)

// MaxRequest bounds one request line.
const MaxRequest = 1 << 20

// EnvFD names the channel's fd in the command's environment.
const EnvFD = "OPENBOT_ACT_FD"

//go:embed python/pyautogui/*.py python/pyperclip/*.py
var modules embed.FS

// Install writes the Python modules into a new root-owned directory (0755,
// files 0644: the bot reads them, nobody else writes them) under base
// ("" = /run) and returns it, for PYTHONPATH. base must be a directory no
// other user can write (the default is root's); everything below the new
// directory is made through an os.Root of it, so no path is followed that
// another user could change.
func Install(base string) (string, error) {
	if base == "" {
		base = "/run"
	}
	dir, err := os.MkdirTemp(base, "botd-python-")
	if err != nil {
		return "", err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	defer root.Close()
	err = root.Chmod(".", 0o755)
	if err == nil {
		err = fs.WalkDir(modules, "python", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel("python", p)
			if d.IsDir() {
				if rel == "." {
					return nil
				}
				if err := root.Mkdir(rel, 0o755); err != nil {
					return err
				}
				return root.Chmod(rel, 0o755)
			}
			b, err := modules.ReadFile(p)
			if err != nil {
				return err
			}
			f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			if _, err := f.Write(b); err != nil {
				f.Close()
				return err
			}
			if err := f.Chmod(0o644); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		})
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// Screen is what a channel acts on: one screen under one lease.
type Screen interface {
	Act(ctx context.Context, actions []shared.Action) error
	Pointer(ctx context.Context) (shared.Point, error)
	Size() (w, h int)
	Clipboard(ctx context.Context) (string, error)
	SetClipboard(ctx context.Context, text string) error
}

// Open makes a channel to s: child is the command's end (pass it as fd 3
// and close it once the command started); stop ends the serving and waits
// for it. Requests are served until the command's end closes or ctx ends.
func Open(ctx context.Context, s Screen) (child *os.File, stop func(), err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("act channel: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "act-channel")
	child = os.NewFile(uintptr(fds[1]), "act-channel-child")
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		serve(ctx, ours, s)
	}()
	go func() {
		<-ctx.Done()
		_ = ours.Close()
	}()
	var once sync.Once
	return child, func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}, nil
}

type request struct {
	Act       []shared.Action `json:"act"`
	Query     string          `json:"query"`
	Clipboard *string         `json:"clipboard"`
}

func serve(ctx context.Context, f *os.File, s Screen) {
	r := bufio.NewReaderSize(f, 64<<10)
	w := bufio.NewWriter(f)
	for {
		line, err := readLine(r)
		if err != nil {
			if errors.Is(err, errTooLong) {
				reply(w, fail(shared.CodeBadRequest, fmt.Sprintf("a request is at most %d bytes", MaxRequest)))
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !reply(w, handle(ctx, s, line)) {
			return
		}
	}
}

var errTooLong = errors.New("request too long")

func readLine(r *bufio.Reader) ([]byte, error) {
	var out []byte
	for {
		part, isPrefix, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		out = append(out, part...)
		if len(out) > MaxRequest {
			return nil, errTooLong
		}
		if !isPrefix {
			return out, nil
		}
	}
}

func reply(w *bufio.Writer, v map[string]any) bool {
	b, _ := json.Marshal(v)
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return false
	}
	return w.Flush() == nil
}

func fail(code shared.Code, msg string) map[string]any {
	return map[string]any{"ok": false, "code": code, "error": msg}
}

func failErr(err error) map[string]any {
	var ae *shared.APIError
	if errors.As(err, &ae) {
		return fail(ae.Code, ae.Message)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fail(shared.CodeTimeout, "the command's time ran out")
	}
	return fail(shared.CodeInternal, "the action failed")
}

func handle(ctx context.Context, s Screen, line []byte) map[string]any {
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return fail(shared.CodeBadRequest, "a request is one JSON object per line")
	}
	switch {
	case req.Act != nil:
		w, h := s.Size()
		if err := shared.ValidateActions(req.Act, w, h); err != nil {
			return fail(shared.CodeInvalidAction, err.Error())
		}
		if err := s.Act(ctx, req.Act); err != nil {
			return failErr(err)
		}
		return map[string]any{"ok": true}
	case req.Clipboard != nil:
		if err := s.SetClipboard(ctx, *req.Clipboard); err != nil {
			return failErr(err)
		}
		return map[string]any{"ok": true}
	case req.Query == "pointer":
		p, err := s.Pointer(ctx)
		if err != nil {
			return failErr(err)
		}
		return map[string]any{"ok": true, "x": p.X, "y": p.Y}
	case req.Query == "size":
		w, h := s.Size()
		return map[string]any{"ok": true, "width": w, "height": h}
	case req.Query == "clipboard":
		t, err := s.Clipboard(ctx)
		if err != nil {
			return failErr(err)
		}
		return map[string]any{"ok": true, "text": t}
	}
	return fail(shared.CodeBadRequest, "unknown request: want act, query (pointer, size, clipboard) or clipboard")
}

// ErrNoScreen: the command asked for an act channel botd cannot give.
var ErrNoScreen = shared.Errorf(http.StatusConflict, shared.CodeScreenUnavailable, "this command's act channel needs a running screen of an evaluation computer")
