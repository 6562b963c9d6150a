package shared

import "testing"

func TestBlockedApplication(t *testing.T) {
	extra := []string{"jobs.example.net", " Careers.Example.ORG "}
	tests := []struct {
		name   string
		method string
		url    string
		want   bool
	}{
		{"get passes", "GET", "https://www.linkedin.com/jobs/apply/123", false},
		{"head passes", "HEAD", "https://www.linkedin.com/jobs/apply/123", false},
		{"options passes", "OPTIONS", "https://www.linkedin.com/apply", false},
		{"lowercase get passes", "get", "https://www.linkedin.com/apply", false},
		{"post apex", "POST", "https://linkedin.com/apply", true},
		{"post subdomain", "POST", "https://www.linkedin.com/jobs/123/apply/submit", true},
		{"deep subdomain", "PUT", "https://a.b.linkedin.com/x?step=apply", true},
		{"naukri", "POST", "https://www.naukri.com/job/Apply", true},
		{"naukri apex query", "PATCH", "https://naukri.com/x?action=APPLY", true},
		{"lowercase method", "post", "https://linkedin.com/easyApply", true},
		{"delete counts", "DELETE", "https://linkedin.com/apply", true},
		{"upper host", "POST", "https://WWW.LinkedIn.COM/Apply", true},
		{"trailing dot host", "POST", "https://www.linkedin.com./apply", true},
		{"port", "POST", "https://www.linkedin.com:8443/apply", true},
		{"percent-encoded apply", "POST", "https://www.linkedin.com/%61pply", true},
		{"no apply", "POST", "https://www.linkedin.com/feed/update", false},
		{"apply only in fragment", "POST", "https://www.linkedin.com/feed#apply", false},
		{"look-alike prefix", "POST", "https://notlinkedin.com/apply", false},
		{"look-alike suffix", "POST", "https://linkedin.com.example.org/apply", false},
		{"look-alike naukri", "POST", "https://mynaukri.com/apply", false},
		{"other host", "POST", "https://example.com/apply", false},
		{"extra domain", "POST", "https://jobs.example.net/apply", true},
		{"extra subdomain", "POST", "https://eu.jobs.example.net/Apply", true},
		{"extra trimmed and lowercased", "POST", "https://careers.example.org/APPLY", true},
		{"extra look-alike", "POST", "https://notjobs.example.net/apply", false},
		{"parent of extra is not guarded", "POST", "https://example.net/apply", false},
		{"unparseable", "POST", "http://[::1", false},
		{"empty host", "POST", "/apply", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BlockedApplication(tt.method, tt.url, extra); got != tt.want {
				t.Errorf("BlockedApplication(%q, %q) = %v, want %v", tt.method, tt.url, got, tt.want)
			}
		})
	}
}

func TestBlockedApplicationNoExtras(t *testing.T) {
	if BlockedApplication("POST", "https://jobs.example.net/apply", nil) {
		t.Error("extra domain guarded without being configured")
	}
	if !BlockedApplication("POST", "https://linkedin.com/apply", nil) {
		t.Error("linkedin not guarded without extras")
	}
}
