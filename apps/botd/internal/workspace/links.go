package workspace

import (
	"path"
	"strings"
)

// portableLink reports whether a symlink at rel (relative to its area's
// root) with this target stays inside the area when resolved lexically from
// the link's directory. Absolute targets never are.
func portableLink(rel, target string) bool {
	if target == "" || strings.HasPrefix(target, "/") || strings.IndexByte(target, 0) >= 0 {
		return false
	}
	r := path.Join(path.Dir(rel), target)
	return r != ".." && !strings.HasPrefix(r, "../")
}
