package files

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/open-bot/computer/pkg/shared"
)

// MaxPathLen caps a workspace-relative path in bytes (Linux's PATH_MAX).
const MaxPathLen = 4096

// maxNameLen caps one path component in bytes (Linux's NAME_MAX).
const maxNameLen = 255

// CheckPath validates a caller's workspace-relative path and returns it in
// the form os.Root expects. Malformed input (empty unless allowRoot, NUL
// bytes, invalid UTF-8, over-long) is a 400; absolute paths and ".."
// components are a 403 FS_SANDBOX_DENIED. These checks only give clear
// errors: containment itself is os.Root's job (it also refuses symlinks that
// lead outside), so a path passing here is still resolved beneath the root.
func CheckPath(p string, allowRoot bool) (string, error) {
	switch {
	case len(p) > MaxPathLen:
		return "", shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "path is longer than %d bytes", MaxPathLen)
	case strings.IndexByte(p, 0) >= 0:
		return "", shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "path contains a NUL byte")
	case !utf8.ValidString(p):
		return "", shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "path is not valid UTF-8")
	case p == "" || p == ".":
		if !allowRoot {
			return "", shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "path is required")
		}
		return ".", nil
	case strings.HasPrefix(p, "/"):
		return "", shared.Errorf(http.StatusForbidden, shared.CodeFSSandboxDenied, "absolute paths are not allowed: paths are relative to the workspace")
	}
	var parts []string
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "..":
			return "", shared.Errorf(http.StatusForbidden, shared.CodeFSSandboxDenied, "\"..\" is not allowed in workspace paths")
		case len(c) > maxNameLen:
			return "", shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "a path component is longer than %d bytes", maxNameLen)
		case c == "" || c == ".":
			continue
		}
		parts = append(parts, c)
	}
	if len(parts) == 0 {
		if !allowRoot {
			return "", shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "path names the workspace root")
		}
		return ".", nil
	}
	return strings.Join(parts, "/"), nil
}

// IsEscape reports whether err is os.Root refusing a path that leads outside
// the root (through "..", an absolute symlink or a symlink climbing out).
// os does not export that error, so its fixed text is compared.
func IsEscape(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "path escapes from parent" {
			return true
		}
	}
	return false
}

// MapError turns a filesystem error on a workspace path into the API's
// error. Unknown errors stay as they are (a 500 whose text is hidden).
func MapError(err error) error {
	var ae *shared.APIError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return err
	case IsEscape(err):
		return shared.Errorf(http.StatusForbidden, shared.CodeFSSandboxDenied, "path leads outside the workspace")
	case errors.Is(err, fs.ErrNotExist):
		return shared.Errorf(http.StatusNotFound, shared.CodeNotFound, "no such file or directory")
	case errors.Is(err, syscall.ENOTDIR):
		return shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "a path component is not a directory")
	case errors.Is(err, syscall.EISDIR):
		return shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "path is a directory")
	case errors.Is(err, syscall.ENAMETOOLONG):
		return shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "path is too long")
	case errors.Is(err, syscall.ELOOP):
		return shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "too many levels of symbolic links")
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return shared.Errorf(http.StatusConflict, shared.CodeConflict, "directory is not empty")
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return shared.Errorf(http.StatusInsufficientStorage, shared.CodeTooLarge, "no space left in the workspace")
	case errors.Is(err, os.ErrInvalid):
		return shared.Errorf(http.StatusBadRequest, shared.CodeBadRequest, "invalid path")
	}
	return err
}
