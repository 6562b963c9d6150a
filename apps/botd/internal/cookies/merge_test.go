package cookies

import (
	"sort"
	"strings"
	"testing"
)

const now = 1_800_000_000.0

func ck(name, value string, exp float64) Cookie {
	c := Cookie{Name: name, Value: value, Domain: ".example.com", Path: "/", Expires: exp, Secure: true, HTTPOnly: true, SameSite: "Lax"}
	if exp < 0 {
		c.Session = true
		c.Expires = -1
	}
	return c
}

func store(cs ...Cookie) map[Key]Cookie {
	m := map[Key]Cookie{}
	for _, c := range cs {
		m[c.Key()] = c
	}
	return m
}

func fps(m map[Key]Cookie) map[Key]string {
	out := map[Key]string{}
	for k, c := range m {
		out[k] = c.Fingerprint()
	}
	return out
}

// describe renders a cookie list as "name=value" sorted, for comparisons.
func describe(cs []Cookie) string {
	s := []string{}
	for _, c := range cs {
		s = append(s, c.Name+"="+c.Value)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func describeJar(m map[Key]Cookie) string {
	cs := []Cookie{}
	for _, c := range m {
		cs = append(cs, c)
	}
	return describe(cs)
}

func TestMergeRules(t *testing.T) {
	later := now + 3600
	sid1 := ck("sid", "v1", later)
	sid2 := ck("sid", "v2", later+60)
	other := ck("pref", "dark", later)
	tests := []struct {
		name  string
		jar   map[Key]Cookie
		tombs map[Key]Tombstone
		cur   []map[Key]Cookie
		last  []map[Key]Cookie // nil entry: a store seen for the first time
		// want
		wantJar string
		sets    []string
		deletes []string
		changed bool
		tomb    bool
	}{
		{
			name:    "nothing changed writes nothing",
			jar:     store(sid1, other),
			cur:     []map[Key]Cookie{store(sid1, other), store(sid1, other)},
			last:    []map[Key]Cookie{store(sid1, other), store(sid1, other)},
			wantJar: "pref=dark,sid=v1", sets: []string{"", ""}, deletes: []string{"", ""},
		},
		{
			name:    "sign-in on A reaches B",
			jar:     store(),
			cur:     []map[Key]Cookie{store(sid1), store()},
			last:    []map[Key]Cookie{store(), store()},
			wantJar: "sid=v1", sets: []string{"", "sid=v1"}, deletes: []string{"", ""}, changed: true,
		},
		{
			name:    "a new value on A replaces B's copy",
			jar:     store(sid1),
			cur:     []map[Key]Cookie{store(sid2), store(sid1)},
			last:    []map[Key]Cookie{store(sid1), store(sid1)},
			wantJar: "sid=v2", sets: []string{"", "sid=v2"}, deletes: []string{"", ""}, changed: true,
		},
		{
			name:    "sign-out on A (the jar holds the same value) is copied as a deletion",
			jar:     store(sid1, other),
			cur:     []map[Key]Cookie{store(other), store(sid1, other)},
			last:    []map[Key]Cookie{store(sid1, other), store(sid1, other)},
			wantJar: "pref=dark", sets: []string{"", ""}, deletes: []string{"", "sid=v1"}, changed: true, tomb: true,
		},
		{
			name:    "a stale copy disappearing does not sign out (the jar holds a newer value)",
			jar:     store(sid2),
			cur:     []map[Key]Cookie{store(), store(sid2)},
			last:    []map[Key]Cookie{store(sid1), store(sid2)},
			wantJar: "sid=v2", sets: []string{"sid=v2", ""}, deletes: []string{"", ""},
		},
		{
			name:    "a sign-in anywhere wins over a copy disappearing elsewhere in the same round",
			jar:     store(sid1),
			cur:     []map[Key]Cookie{store(), store(sid2)},
			last:    []map[Key]Cookie{store(sid1), store(sid1)},
			wantJar: "sid=v2", sets: []string{"sid=v2", ""}, deletes: []string{"", ""}, changed: true,
		},
		{
			name:    "a browser started later begins with every sign-in; the jar beats its old copy",
			jar:     store(sid2, other),
			cur:     []map[Key]Cookie{store(sid2, other), store(sid1)},
			last:    []map[Key]Cookie{store(sid2, other), nil},
			wantJar: "pref=dark,sid=v2", sets: []string{"", "pref=dark,sid=v2"}, deletes: []string{"", ""},
		},
		{
			name:    "a browser started later brings cookies the jar does not know",
			jar:     store(sid1),
			cur:     []map[Key]Cookie{store(sid1), store(other)},
			last:    []map[Key]Cookie{store(sid1), nil},
			wantJar: "pref=dark,sid=v1", sets: []string{"pref=dark", "sid=v1"}, deletes: []string{"", ""}, changed: true,
		},
		{
			name:    "a browser started later does not bring back a signed-out cookie",
			jar:     store(),
			tombs:   map[Key]Tombstone{sid1.Key(): {FP: hashFP(sid1.Fingerprint()), At: now - 60}},
			cur:     []map[Key]Cookie{store(), store(sid1)},
			last:    []map[Key]Cookie{store(), nil},
			wantJar: "", sets: []string{"", ""}, deletes: []string{"", "sid=v1"}, tomb: true,
		},
		{
			name:    "a new sign-in after a sign-out clears the tombstone",
			jar:     store(),
			tombs:   map[Key]Tombstone{sid1.Key(): {FP: hashFP(sid1.Fingerprint()), At: now - 60}},
			cur:     []map[Key]Cookie{store(sid2), store()},
			last:    []map[Key]Cookie{store(), store()},
			wantJar: "sid=v2", sets: []string{"", "sid=v2"}, deletes: []string{"", ""}, changed: true,
		},
		{
			name:    "two sign-ins in one round: the longer-lived copy wins",
			jar:     store(),
			cur:     []map[Key]Cookie{store(sid1), store(sid2)},
			last:    []map[Key]Cookie{store(), store()},
			wantJar: "sid=v2", sets: []string{"sid=v2", ""}, deletes: []string{"", ""}, changed: true,
		},
		{
			name:    "expired cookies leave the jar",
			jar:     store(ck("old", "x", now-10), sid1),
			cur:     []map[Key]Cookie{store(sid1)},
			last:    []map[Key]Cookie{store(sid1)},
			wantJar: "sid=v1", sets: []string{""}, deletes: []string{""}, changed: true,
		},
		{
			name:    "session cookies are shared too",
			jar:     store(),
			cur:     []map[Key]Cookie{store(ck("s", "1", -1)), store()},
			last:    []map[Key]Cookie{store(), store()},
			wantJar: "s=1", sets: []string{"", "s=1"}, deletes: []string{"", ""}, changed: true,
		},
		{
			name: "a flag change is a change",
			jar:  store(sid1),
			cur: []map[Key]Cookie{store(func() Cookie {
				c := sid1
				c.HTTPOnly = false
				return c
			}()), store(sid1)},
			last:    []map[Key]Cookie{store(sid1), store(sid1)},
			wantJar: "sid=v1", sets: []string{"", "sid=v1"}, deletes: []string{"", ""}, changed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			last := make([]map[Key]string, len(tt.last))
			for i, l := range tt.last {
				if l != nil {
					last[i] = fps(l)
				}
			}
			tombs := tt.tombs
			if tombs == nil {
				tombs = map[Key]Tombstone{}
			}
			p := merge(tt.jar, tombs, tt.cur, last, now)
			if got := describeJar(p.Jar); got != tt.wantJar {
				t.Errorf("jar = %q, want %q", got, tt.wantJar)
			}
			for i := range tt.cur {
				if got := describe(p.Sets[i]); got != tt.sets[i] {
					t.Errorf("store %d sets = %q, want %q", i, got, tt.sets[i])
				}
				if got := describe(p.Deletes[i]); got != tt.deletes[i] {
					t.Errorf("store %d deletes = %q, want %q", i, got, tt.deletes[i])
				}
				if len(p.Held[i]) != len(p.Jar) {
					t.Errorf("store %d will hold %d cookies, jar has %d", i, len(p.Held[i]), len(p.Jar))
				}
			}
			if p.JarChanged != tt.changed {
				t.Errorf("JarChanged = %v, want %v", p.JarChanged, tt.changed)
			}
			if got := len(p.Tombstones) > 0; got != tt.tomb {
				t.Errorf("tombstones %v, want %v", p.Tombstones, tt.tomb)
			}
		})
	}
}

func TestMergeDoesNotMutateInputs(t *testing.T) {
	jar := store(ck("a", "1", now+100))
	_ = merge(jar, map[Key]Tombstone{}, []map[Key]Cookie{store()}, []map[Key]string{fps(jar)}, now)
	if len(jar) != 1 {
		t.Fatal("merge changed the caller's jar")
	}
}

func TestParamKeepsHostOnly(t *testing.T) {
	host := Cookie{Name: "__Host-id", Value: "x", Domain: "www.example.com", Path: "/", Secure: true, Session: true, Expires: -1}
	p := host.Param()
	if p.Domain != "" || p.URL != "https://www.example.com/" {
		t.Fatalf("host-only param %+v", p)
	}
	dom := Cookie{Name: "id", Value: "x", Domain: ".example.com", Path: "/a", Expires: now}
	p = dom.Param()
	if p.Domain != ".example.com" || p.URL != "" || float64(p.Expires) != now {
		t.Fatalf("domain param %+v", p)
	}
	d := dom.DeleteParam()
	if d.Value == "x" || float64(d.Expires) != 1 {
		t.Fatalf("delete param %+v", d)
	}
}

func TestFingerprintCovers(t *testing.T) {
	base := ck("a", "1", now+100)
	for name, mod := range map[string]func(*Cookie){
		"value":    func(c *Cookie) { c.Value = "2" },
		"expiry":   func(c *Cookie) { c.Expires += 10 },
		"secure":   func(c *Cookie) { c.Secure = false },
		"httpOnly": func(c *Cookie) { c.HTTPOnly = false },
		"sameSite": func(c *Cookie) { c.SameSite = "Strict" },
		"session":  func(c *Cookie) { c.Session, c.Expires = true, -1 },
	} {
		c := base
		mod(&c)
		if c.Fingerprint() == base.Fingerprint() {
			t.Errorf("fingerprint ignores %s", name)
		}
	}
	c := base
	c.Expires += 0.4
	if c.Fingerprint() != base.Fingerprint() {
		t.Error("fingerprint depends on sub-second expiry")
	}
}
