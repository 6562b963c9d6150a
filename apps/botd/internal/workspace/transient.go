package workspace

import (
	"path"
	"strings"
)

// transientDirs are directories inside a Chromium profile that hold only
// caches Chromium rebuilds on its own. Matched by exact name at any depth
// inside desktop/screens/<id>/chromium — never elsewhere, so a project
// folder named "Cache" in the workspace stays.
var transientDirs = map[string]bool{
	"Cache":             true,
	"Code Cache":        true,
	"GPUCache":          true,
	"ShaderCache":       true,
	"GrShaderCache":     true,
	"GraphiteDawnCache": true,
	"DawnCache":         true,
	"DawnGraphiteCache": true,
	"DawnWebGPUCache":   true,
	"Crashpad":          true,
}

// transientFiles are non-directories inside a Chromium profile that only
// mean "a browser is running now": Singleton{Lock,Socket,Cookie} (a stale
// SingletonLock makes the next Chromium refuse the profile), lockfile,
// DevToolsActivePort, and LevelDB's LOCK files (empty; LevelDB recreates
// them on open). SQLite's -journal and -wal files are NOT transient (a WAL
// can hold committed data) and are kept.
func transientFile(name string) bool {
	return strings.HasPrefix(name, "Singleton") || name == "lockfile" || name == "LOCK" || name == "DevToolsActivePort"
}

// Transient reports whether rel (relative to a Chromium profile directory)
// is a transient cache or lock file, or lies inside a transient directory.
func Transient(rel string, isDir bool) bool {
	if rel == "." || rel == "" {
		return false
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts[:len(parts)-1] {
		if transientDirs[p] {
			return true
		}
	}
	last := parts[len(parts)-1]
	if isDir {
		return transientDirs[last]
	}
	return transientFile(last)
}

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
