package browser

import "testing"

// The command lines a profile's lock may lead to: Chromium's own arguments
// (NUL-separated), the one title a Chromium with a display rewrites them
// into (seen on a person's browser started from the screen's menu), and
// look-alikes that name another profile.
func TestNamesProfile(t *testing.T) {
	const dir = "/h/desktop/screens/bt1/chromium"
	for _, c := range []struct {
		cmd  string
		want bool
	}{
		{"/usr/lib/chromium/chromium\x00--no-first-run\x00--user-data-dir=" + dir + "\x00about:blank\x00", true},
		{"/usr/lib/chromium/chromium --proxy-bypass-list=<-loopback> --host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1 --user-data-dir=" + dir + " --window-size=1280,800 http://www.site.test/menu\x00", true},
		{"/usr/lib/chromium/chromium --user-data-dir=" + dir + "\x00", true},
		{"/usr/lib/chromium/chromium\x00--user-data-dir=" + dir + "2\x00", false},
		{"/usr/lib/chromium/chromium --user-data-dir=" + dir + "2 --no-first-run\x00", false},
		{"/usr/lib/chromium/chromium --user-data-dir=/x" + dir + "\x00", false},
		{"chromium-y\x00-c\x00sleep 600 --user-data-dir=" + dir + " x\x00", false}, // one argument among several, not the flag
		{"/usr/lib/chromium/chromium\x00--user-data-dir\x00" + dir + "\x00", false},
		{"", false},
	} {
		if got := namesProfile([]byte(c.cmd), dir); got != c.want {
			t.Errorf("namesProfile(%q) = %v, want %v", c.cmd, got, c.want)
		}
	}
}
