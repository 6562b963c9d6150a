package cookies

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
)

// fakeStore behaves like Chromium's cookie store for what CookieSync uses:
// a URL param makes a host-only cookie, an expired param deletes.
type fakeStore struct {
	id string
	// mu guards m and fail.
	mu   sync.Mutex
	m    map[Key]Cookie
	fail bool
}

func newFakeStore(id string) *fakeStore { return &fakeStore{id: id, m: map[Key]Cookie{}} }

func (f *fakeStore) ID() string { return f.id }

func (f *fakeStore) GetCookies(context.Context) ([]*network.Cookie, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, errors.New("browser gone")
	}
	out := make([]*network.Cookie, 0, len(f.m))
	for _, c := range f.m {
		n := &network.Cookie{Name: c.Name, Value: c.Value, Domain: c.Domain, Path: c.Path, Expires: c.Expires, Session: c.Session, Secure: c.Secure, HTTPOnly: c.HTTPOnly, SameSite: network.CookieSameSite(c.SameSite)}
		out = append(out, n)
	}
	return out, nil
}

func (f *fakeStore) SetCookies(_ context.Context, ps []*network.CookieParam) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return errors.New("browser gone")
	}
	for _, p := range ps {
		c := Cookie{Name: p.Name, Value: p.Value, Domain: p.Domain, Path: p.Path, Secure: p.Secure, HTTPOnly: p.HTTPOnly, SameSite: string(p.SameSite), Expires: float64(p.Expires)}
		if p.URL != "" {
			u, _ := url.Parse(p.URL)
			c.Domain = u.Hostname()
		}
		if c.Expires == 0 {
			c.Session, c.Expires = true, -1
		}
		if !c.Session && c.Expires < float64(time.Now().Unix()) {
			delete(f.m, c.Key())
			continue
		}
		f.m[c.Key()] = c
	}
	return nil
}

func (f *fakeStore) put(c Cookie) {
	f.mu.Lock()
	f.m[c.Key()] = c
	f.mu.Unlock()
}

func (f *fakeStore) del(k Key) {
	f.mu.Lock()
	delete(f.m, k)
	f.mu.Unlock()
}

func (f *fakeStore) get(k Key) (Cookie, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.m[k]
	return c, ok
}

func liveCookie(name, value string) Cookie {
	return Cookie{Name: name, Value: value, Domain: ".example.com", Path: "/", Expires: float64(time.Now().Add(time.Hour).Unix()), Secure: true, HTTPOnly: true, SameSite: "Lax"}
}

func TestSyncRoundTripAndPersistence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ".botd", "cookies.json")
	ctx := context.Background()
	s, err := Load(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newFakeStore("a"), newFakeStore("b")
	if err := s.Add(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, b); err != nil {
		t.Fatal(err)
	}
	if s.Writes() != 0 {
		t.Fatalf("empty browsers wrote the jar %d times", s.Writes())
	}

	// Sign in on A.
	sid := liveCookie("sid", "secret-1")
	a.put(sid)
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok := b.get(sid.Key()); !ok || got.Value != "secret-1" {
		t.Fatalf("B did not get the sign-in: %+v %v", got, ok)
	}
	if s.Writes() != 1 {
		t.Fatalf("writes = %d", s.Writes())
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("jar mode %v", st.Mode())
	}
	if dst, _ := os.Stat(filepath.Dir(path)); dst.Mode().Perm() != 0o700 {
		t.Fatalf("jar dir mode %v", dst.Mode())
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}

	// Nothing changed: no disk write.
	for range 3 {
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s.Writes() != 1 {
		t.Fatalf("an unchanged round wrote the jar: writes = %d", s.Writes())
	}

	// A restart: a new Sync loading the jar gives a fresh browser the sign-in.
	s2, err := Load(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	c := newFakeStore("c")
	if err := s2.Add(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.get(sid.Key()); !ok || got.Value != "secret-1" {
		t.Fatalf("a browser started after a restart lacks the sign-in: %+v %v", got, ok)
	}

	// Sign out on B: A loses it too, and the jar forgets it.
	b.del(sid.Key())
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.get(sid.Key()); ok {
		t.Fatal("the sign-out did not reach A")
	}
	if s.Len() != 0 {
		t.Fatalf("jar still holds %d cookies", s.Len())
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), "secret-1") {
		t.Fatal("the jar file still holds the signed-out value")
	}
}

func TestSyncSkipsAFailingBrowser(t *testing.T) {
	s, _ := Load(Options{Path: filepath.Join(t.TempDir(), "cookies.json")})
	ctx := context.Background()
	a, b := newFakeStore("a"), newFakeStore("b")
	_ = s.Add(ctx, a)
	_ = s.Add(ctx, b)
	b.mu.Lock()
	b.fail = true
	b.mu.Unlock()
	a.put(liveCookie("sid", "1"))
	if err := s.Sync(ctx); err == nil {
		t.Fatal("want an error naming the failing browser")
	}
	if s.Len() != 1 {
		t.Fatalf("jar %d", s.Len())
	}
	b.mu.Lock()
	b.fail = false
	b.mu.Unlock()
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.get(liveCookie("sid", "1").Key()); !ok {
		t.Fatal("B did not catch up after it recovered")
	}
	s.Remove(b)
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptJarStartsEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cookies.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(Options{Path: path})
	if err != nil || s.Len() != 0 {
		t.Fatalf("%v %d", err, s.Len())
	}
}

// BenchmarkSyncRound is one CookieSync round with 4 browsers × 500 cookies
// where nothing changed (the steady state: no disk write), and one where a
// single cookie changed.
func BenchmarkSyncRound(b *testing.B) {
	for _, changing := range []bool{false, true} {
		name := "unchanged"
		if changing {
			name = "one-change"
		}
		b.Run(name, func(b *testing.B) {
			s, _ := Load(Options{Path: filepath.Join(b.TempDir(), "cookies.json")})
			ctx := context.Background()
			stores := make([]*fakeStore, 4)
			for i := range stores {
				stores[i] = newFakeStore(fmt.Sprint(i))
				for j := range 500 {
					stores[i].put(liveCookie(fmt.Sprintf("c%d", j), strings.Repeat("v", 40)))
				}
				_ = s.Add(ctx, stores[i])
			}
			w0 := s.Writes()
			b.ResetTimer()
			for i := range b.N {
				if changing {
					stores[i%4].put(liveCookie("c7", fmt.Sprint("value-", i)))
				}
				if err := s.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if !changing && s.Writes() != w0 {
				b.Fatalf("unchanged rounds wrote the jar %d times", s.Writes()-w0)
			}
			b.ReportMetric(float64(s.Writes()-w0)/float64(b.N), "writes/op")
		})
	}
}

// Rounds in which no browser changed skip the merge; these are the changes
// such a steady state must still notice.
func TestSyncAfterSteadyRounds(t *testing.T) {
	ctx := context.Background()
	clock := time.Now()
	s, _ := Load(Options{Path: filepath.Join(t.TempDir(), "cookies.json"), Now: func() time.Time { return clock }})
	a, b := newFakeStore("a"), newFakeStore("b")
	short := liveCookie("short", "s1")
	short.Expires = float64(clock.Add(time.Minute).Unix())
	a.put(short)
	a.put(liveCookie("sid", "v1"))
	_ = s.Add(ctx, a)
	_ = s.Add(ctx, b)
	steady := func() {
		t.Helper()
		for range 3 {
			if err := s.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	steady()
	w := s.Writes()

	// A new value on B after steady rounds reaches A and the jar.
	b.put(liveCookie("sid", "v2"))
	steady()
	if got, _ := a.get(liveCookie("sid", "").Key()); got.Value != "v2" {
		t.Fatalf("A holds %q after B changed sid", got.Value)
	}
	if s.Writes() != w+1 {
		t.Fatalf("jar writes %d, want %d", s.Writes(), w+1)
	}

	// A cookie running out leaves the jar though no browser changed.
	clock = clock.Add(2 * time.Minute)
	steady()
	if s.Len() != 1 {
		t.Fatalf("jar holds %d cookies after one expired, want 1", s.Len())
	}

	// A browser whose write failed catches up once it works again.
	b.mu.Lock()
	b.fail = true
	b.mu.Unlock()
	a.put(liveCookie("sid", "v3"))
	_ = s.Sync(ctx)
	b.mu.Lock()
	b.fail = false
	b.mu.Unlock()
	steady()
	if got, _ := b.get(liveCookie("sid", "").Key()); got.Value != "v3" {
		t.Fatalf("B holds %q after it recovered, want v3", got.Value)
	}
}
