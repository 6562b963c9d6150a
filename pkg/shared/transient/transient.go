// Package transient is the one list of what inside a Chromium profile is
// transient: caches Chromium rebuilds on its own and files that only mean
// "a browser runs on this profile now". botd's workspace export and import
// and the worker's desktop machine's export leave exactly these out of a
// profile's copy, and nothing else.
package transient

import (
	"slices"
	"strings"
)

// dirs are directories inside a Chromium profile that hold only caches
// Chromium rebuilds on its own. Matched by exact name at any depth inside a
// profile, never elsewhere, so a project folder named "Cache" in the
// workspace stays.
var dirs = []string{
	"Cache",
	"Code Cache",
	"GPUCache",
	"ShaderCache",
	"GrShaderCache",
	"GraphiteDawnCache",
	"DawnCache",
	"DawnGraphiteCache",
	"DawnWebGPUCache",
	"Crashpad",
	// Chromium's own usage metrics: histograms persisted while it runs
	// (BrowserMetrics/*.pma) and the segmentation platform's databases,
	// both written until the browser's last moment and made again at its
	// next start. A desktop sandbox's checkpoint failed in CI on each
	// ("file changed as we read it", a -wal gone mid-copy).
	"BrowserMetrics",
	"segmentation_platform",
}

// filePrefixes and fileNames are non-directories inside a Chromium profile
// that only mean "a browser is running now": Singleton{Lock,Socket,Cookie}
// (a stale SingletonLock makes the next Chromium refuse the profile, and one
// written on another host makes it refuse the profile as "in use by another
// computer"), lockfile, DevToolsActivePort, and LevelDB's LOCK files (empty;
// LevelDB recreates them on open). SQLite's -journal and -wal files are NOT
// transient (a WAL can hold committed data) and are kept.
var (
	filePrefixes = []string{"Singleton"}
	fileNames    = []string{"lockfile", "LOCK", "DevToolsActivePort"}
)

// Dirs are the names of transient directories (a copy).
func Dirs() []string { return slices.Clone(dirs) }

// FilePrefixes are the name prefixes of transient non-directories (a copy).
func FilePrefixes() []string { return slices.Clone(filePrefixes) }

// FileNames are the exact names of transient non-directories (a copy).
func FileNames() []string { return slices.Clone(fileNames) }

// Dir reports whether a directory named name inside a profile is transient.
func Dir(name string) bool { return slices.Contains(dirs, name) }

// File reports whether a non-directory named name inside a profile is
// transient.
func File(name string) bool {
	for _, p := range filePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return slices.Contains(fileNames, name)
}

// Transient reports whether rel (slash-separated, relative to a Chromium
// profile directory) is a transient cache or lock file, or lies inside a
// transient directory. The profile directory itself ("." or "") is not.
func Transient(rel string, isDir bool) bool {
	if rel == "." || rel == "" {
		return false
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts[:len(parts)-1] {
		if Dir(p) {
			return true
		}
	}
	last := parts[len(parts)-1]
	if isDir {
		return Dir(last)
	}
	return File(last)
}
