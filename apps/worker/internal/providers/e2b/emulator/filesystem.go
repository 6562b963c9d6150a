package emulator

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/filesystem"
	"github.com/open-bot/computer/apps/worker/internal/providers/e2b/envd/filesystem/filesystemconnect"
)

// fsService serves filesystem.Filesystem through commands in the container,
// run as the request's user (so permissions are the user's). Watching
// directories is not served (Unimplemented).
type fsService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	e *Emulator
}

func (s *fsService) rpcUser(ctx context.Context, auth string) (*sandbox, userInfo, error) {
	b := boxOf(ctx)
	name := ""
	if auth != "" {
		name = basicUser(map[string][]string{"Authorization": {auth}})
	}
	u, err := s.e.user(ctx, b, name)
	if err != nil {
		return nil, userInfo{}, connect.NewError(connect.CodeUnauthenticated, err)
	}
	return b, u, nil
}

func entryInfo(en entry) *filesystem.EntryInfo {
	info := &filesystem.EntryInfo{
		Name: path.Base(en.path), Path: en.path, Size: en.size, Mode: en.mode,
		Permissions: en.perms, Owner: en.owner, Group: en.group,
		ModifiedTime: timestamppb.New(en.mtime),
	}
	switch en.kind {
	case 'f':
		info.Type = filesystem.FileType_FILE_TYPE_FILE
	case 'd':
		info.Type = filesystem.FileType_FILE_TYPE_DIRECTORY
	case 'l':
		info.Type = filesystem.FileType_FILE_TYPE_SYMLINK
		t := en.link
		info.SymlinkTarget = &t
	}
	return info
}

// statRPC stats a path as the user, with envd's error codes.
func (s *fsService) statRPC(ctx context.Context, b *sandbox, u userInfo, p string) (entry, error) {
	en, err := s.e.stat(ctx, b, u, p)
	if errors.Is(err, errNotFound) {
		return entry{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("file not found: %s", p))
	}
	if err != nil {
		return entry{}, connect.NewError(connect.CodeInternal, fmt.Errorf("error getting file info: %v", err))
	}
	return en, nil
}

func (s *fsService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	b, u, err := s.rpcUser(ctx, req.Header().Get("Authorization"))
	if err != nil {
		return nil, err
	}
	en, err := s.statRPC(ctx, b, u, resolve(req.Msg.GetPath(), u))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: entryInfo(en)}), nil
}

func (s *fsService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	b, u, err := s.rpcUser(ctx, req.Header().Get("Authorization"))
	if err != nil {
		return nil, err
	}
	p := resolve(req.Msg.GetPath(), u)
	en, err := s.statRPC(ctx, b, u, p)
	if err != nil {
		return nil, err
	}
	if !en.dir {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", p))
	}
	depth := req.Msg.GetDepth()
	if depth == 0 {
		depth = 1
	}
	out, errOut, code, err := s.e.run(ctx, b, u.name, []string{"find", p, "-mindepth", "1", "-maxdepth", strconv.Itoa(int(depth)), "-printf", findFormat}, nil)
	if err != nil || (code != 0 && len(out) == 0) {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error reading directory: %v %s", err, strings.TrimSpace(string(errOut))))
	}
	var entries []*filesystem.EntryInfo
	for _, en := range parseEntries(out) {
		entries = append(entries, entryInfo(en))
	}
	return connect.NewResponse(&filesystem.ListDirResponse{Entries: entries}), nil
}

func (s *fsService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	b, u, err := s.rpcUser(ctx, req.Header().Get("Authorization"))
	if err != nil {
		return nil, err
	}
	p := resolve(req.Msg.GetPath(), u)
	if en, err := s.e.stat(ctx, b, u, p); err == nil {
		if en.dir {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but it is not a directory: %s", p))
	}
	if _, errOut, code, err := s.e.run(ctx, b, u.name, []string{"mkdir", "-p", "--", p}, nil); err != nil || code != 0 {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error creating directory: %v %s", err, strings.TrimSpace(string(errOut))))
	}
	en, err := s.statRPC(ctx, b, u, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: entryInfo(en)}), nil
}

func (s *fsService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	b, u, err := s.rpcUser(ctx, req.Header().Get("Authorization"))
	if err != nil {
		return nil, err
	}
	src, dst := resolve(req.Msg.GetSource(), u), resolve(req.Msg.GetDestination(), u)
	if _, err := s.statRPC(ctx, b, u, src); err != nil {
		return nil, err
	}
	script := `mkdir -p -- "$(dirname -- "$2")" && mv -- "$1" "$2"`
	if _, errOut, code, err := s.e.run(ctx, b, u.name, []string{"/bin/sh", "-c", script, "sh", src, dst}, nil); err != nil || code != 0 {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error renaming: %v %s", err, strings.TrimSpace(string(errOut))))
	}
	en, err := s.statRPC(ctx, b, u, dst)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: entryInfo(en)}), nil
}

func (s *fsService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	b, u, err := s.rpcUser(ctx, req.Header().Get("Authorization"))
	if err != nil {
		return nil, err
	}
	p := resolve(req.Msg.GetPath(), u)
	if _, err := s.statRPC(ctx, b, u, p); err != nil {
		return nil, err
	}
	if _, errOut, code, err := s.e.run(ctx, b, u.name, []string{"rm", "-rf", "--", p}, nil); err != nil || code != 0 {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error removing: %v %s", err, strings.TrimSpace(string(errOut))))
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}
