package transient

import "testing"

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		rel   string
		isDir bool
		want  bool
	}{
		{".", true, false},
		{"", true, false},
		{"Default/Cookies", false, false},
		{"Default/Cookies-journal", false, false},
		{"Default/Sessions/Session_1", false, false},
		{"Local State", false, false},
		{"Default/Cache", true, true},
		{"Default/Cache/Cache_Data/index", false, true},
		{"Default/Code Cache", true, true},
		{"GrShaderCache", true, true},
		{"Crashpad/settings.dat", false, true},
		{"BrowserMetrics/BrowserMetrics-6B119D7F-3C1.pma", false, true},
		{"segmentation_platform/ukm_db-wal", false, true},
		{"Default/segmentation_platform", true, true},
		{"Default/Cache", false, false}, // a file named like a cache dir stays
		{"SingletonLock", false, true},
		{"SingletonSocket", false, true},
		{"SingletonCookie", false, true},
		{"SingletonLock", true, false}, // a directory named like a lock stays
		{"lockfile", false, true},
		{"DevToolsActivePort", false, true},
		{"Default/Local Storage/leveldb/LOCK", false, true},
		{"Default/Local Storage/leveldb/LOG", false, false},
		{"Default/LOCKED", false, false},
	} {
		if got := Transient(c.rel, c.isDir); got != c.want {
			t.Errorf("Transient(%q, dir=%v) = %v, want %v", c.rel, c.isDir, got, c.want)
		}
	}
	d := Dirs()
	d[0] = "changed"
	if !Dir("Cache") {
		t.Error("Dirs returned the list itself, not a copy")
	}
}
