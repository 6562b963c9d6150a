package shared

import (
	"net/url"
	"strings"
)

// GuardedPortals are the job portals whose application endpoints the apply
// guard always protects (with every subdomain).
var GuardedPortals = []string{"linkedin.com", "naukri.com"}

// ApplyGuardPatterns are the Fetch.enable URL patterns that pause a request
// for the apply guard. Fetch patterns are case-sensitive, hence the three
// spellings; BlockedApplication then decides case-insensitively.
var ApplyGuardPatterns = []string{"*apply*", "*Apply*", "*APPLY*"}

// BlockedApplication reports whether a request would submit a job
// application, which teammates must never do. The rule is deliberately
// broad: GET, HEAD and OPTIONS always pass, so reading postings works; any
// other method is blocked when the path or query mentions "apply" (any case)
// and the host is a guarded portal (linkedin.com, naukri.com, or a domain in
// extraDomains), or a subdomain of one. Look-alikes such as notlinkedin.com
// or linkedin.com.example.org are not guarded.
func BlockedApplication(method, rawURL string, extraDomains []string) bool {
	switch strings.ToUpper(strings.TrimSpace(method)) {
	case "GET", "HEAD", "OPTIONS":
		return false
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	if !mentionsApply(u) {
		return false
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return false
	}
	for _, list := range [][]string{GuardedPortals, extraDomains} {
		for _, d := range list {
			d = strings.Trim(strings.ToLower(strings.TrimSpace(d)), ".")
			if d == "" {
				continue
			}
			if host == d || strings.HasSuffix(host, "."+d) {
				return true
			}
		}
	}
	return false
}

// mentionsApply looks for "apply" in the path and query, both as sent and
// percent-decoded, so %61pply cannot slip past.
func mentionsApply(u *url.URL) bool {
	parts := []string{u.EscapedPath(), u.Path, u.RawQuery}
	if q, err := url.QueryUnescape(u.RawQuery); err == nil {
		parts = append(parts, q)
	}
	if u.Opaque != "" {
		parts = append(parts, u.Opaque)
	}
	for _, p := range parts {
		if strings.Contains(strings.ToLower(p), "apply") {
			return true
		}
	}
	return false
}
