// Package cookies keeps the screens' browsers signed in together. Two
// Chromium processes cannot share a profile, so each screen has its own and
// CookieSync keeps their cookies in step through one jar: every 2 s it reads
// each running browser's cookies, finds what changed in each since the last
// sync, merges the changes into the jar, writes them into every other
// browser, and persists the jar (root only, atomically) so a browser started
// later begins with every sign-in. Only cookies are shared. Cookie values
// are never logged.
package cookies

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/rs/zerolog"
)

// Interval is how often Run syncs.
const Interval = 2 * time.Second

// Store is one browser's cookie store (browser.Browser implements it).
type Store interface {
	ID() string
	GetCookies(ctx context.Context) ([]*network.Cookie, error)
	SetCookies(ctx context.Context, cookies []*network.CookieParam) error
}

// Options configures a Sync.
type Options struct {
	// Path is the jar file ($BOTD_HOME/.botd/cookies.json).
	Path string
	Log  *zerolog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// StoreTimeout bounds each browser's read and write (default 5 s).
	StoreTimeout time.Duration
}

// Sync is CookieSync.
type Sync struct {
	path    string
	log     zerolog.Logger
	now     func() time.Time
	timeout time.Duration

	// runMu serializes sync rounds.
	runMu sync.Mutex

	// mu guards stores, last, inStep, merges, jar, tombs and writes.
	mu     sync.Mutex
	stores []Store
	last   map[Store]map[Key]string
	// merges counts the rounds that merged (the jar may change only then).
	// inStep[st] == merges says st's last is the jar's own fingerprints:
	// after the latest merge it held exactly the jar. A store that sat that
	// merge out (its read failed) keeps an older number.
	merges int
	inStep map[Store]int
	jar    map[Key]Cookie
	tombs  map[Key]Tombstone
	writes int
}

// Load returns a Sync with the jar read from o.Path (an absent file is an
// empty jar; an unreadable one is logged and replaced on the next change).
func Load(o Options) (*Sync, error) {
	if o.Path == "" {
		return nil, errors.New("cookies: Path is required")
	}
	s := &Sync{path: o.Path, now: o.Now, timeout: o.StoreTimeout, last: map[Store]map[Key]string{}, inStep: map[Store]int{}}
	if s.now == nil {
		s.now = time.Now
	}
	if s.timeout <= 0 {
		s.timeout = 5 * time.Second
	}
	if o.Log != nil {
		s.log = o.Log.With().Str("component", "cookies").Logger()
	} else {
		s.log = zerolog.Nop()
	}
	jar, tombs, err := readJar(o.Path)
	if err != nil {
		s.log.Warn().Err(err).Msg("cookie jar unreadable; starting with an empty jar")
		jar, tombs = map[Key]Cookie{}, map[Key]Tombstone{}
	}
	s.jar, s.tombs = jar, tombs
	s.log.Info().Int("cookies", len(jar)).Msg("cookie jar loaded")
	return s, nil
}

// Add registers a running browser and syncs at once, so it begins with
// every sign-in instead of waiting for the next tick.
func (s *Sync) Add(ctx context.Context, st Store) error {
	s.mu.Lock()
	for _, x := range s.stores {
		if x == st {
			s.mu.Unlock()
			return nil
		}
	}
	s.stores = append(s.stores, st)
	s.mu.Unlock()
	return s.Sync(ctx)
}

// Remove forgets a browser (it stopped).
func (s *Sync) Remove(st Store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.stores {
		if x == st {
			s.stores = append(s.stores[:i], s.stores[i+1:]...)
			break
		}
	}
	delete(s.last, st)
	delete(s.inStep, st)
}

// Run syncs every Interval until ctx ends.
func (s *Sync) Run(ctx context.Context) {
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Sync(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("cookie sync")
			}
		}
	}
}

// Writes counts the jar's disk writes (tests and benchmarks check that an
// unchanged round writes nothing).
func (s *Sync) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// Len is the number of cookies in the jar.
func (s *Sync) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.jar)
}

// Sync runs one round: read, merge, write back, persist.
func (s *Sync) Sync(ctx context.Context) error {
	s.runMu.Lock()
	defer s.runMu.Unlock()

	s.mu.Lock()
	stores := append([]Store(nil), s.stores...)
	lastOf := make([]map[Key]string, len(stores))
	for i, st := range stores {
		if s.merges > 0 && s.inStep[st] == s.merges {
			lastOf[i] = s.last[st]
		}
	}
	s.mu.Unlock()

	// 1. Read every browser (in parallel; a browser that fails sits out).
	// Each also checks, while the others still answer, whether it holds
	// exactly what it held after the last round.
	type read struct {
		cur  map[Key]Cookie
		fp   map[Key]string
		same bool
		err  error
	}
	reads := make([]read, len(stores))
	var wg sync.WaitGroup
	for i, st := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			cs, err := st.GetCookies(rctx)
			if err != nil {
				reads[i].err = err
				return
			}
			m := make(map[Key]Cookie, len(cs))
			for _, n := range cs {
				c := FromNetwork(n)
				m[c.Key()] = c
			}
			reads[i].cur = m
			reads[i].fp = fingerprints(m) // while the others still answer
			reads[i].same = lastOf[i] != nil && sameFP(reads[i].fp, lastOf[i])
		}()
	}
	wg.Wait()
	var live []Store
	var cur []map[Key]Cookie
	var curFP []map[Key]string
	var errs []error
	steady := true
	for i, r := range reads {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", stores[i].ID(), r.err))
			continue
		}
		steady = steady && r.same
		live = append(live, stores[i])
		cur = append(cur, r.cur)
		curFP = append(curFP, r.fp)
	}

	now := float64(s.now().UnixNano()) / 1e9

	// Steady state: every browser that answered holds exactly the jar, as
	// after the last round, and nothing in the jar ran out. The merge
	// would find no change, write nothing and keep the jar: skip it.
	s.mu.Lock()
	if steady && !s.expiring(now) {
		s.mu.Unlock()
		return errors.Join(errs...)
	}

	// 2–3. Find each browser's changes and merge them into the jar.
	last := make([]map[Key]string, len(live))
	for i, st := range live {
		last[i] = s.last[st]
	}
	p := mergeFP(s.jar, s.tombs, cur, curFP, last, now)
	s.mu.Unlock()

	// 4. Write the changes into every browser.
	held := make([]map[Key]string, len(live))
	inStep := make([]bool, len(live))
	for i, st := range live {
		held[i], inStep[i] = p.Held[i], true
		params := make([]*network.CookieParam, 0, len(p.Sets[i])+len(p.Deletes[i]))
		for _, c := range p.Sets[i] {
			params = append(params, c.Param())
		}
		for _, c := range p.Deletes[i] {
			params = append(params, c.DeleteParam())
		}
		if len(params) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			if err := st.SetCookies(wctx, params); err != nil {
				// Retry next round: it still holds what we read.
				held[i], inStep[i] = curFP[i], false
				s.log.Warn().Err(err).Str("screen", st.ID()).Msg("write cookies")
				return
			}
			s.log.Debug().Str("screen", st.ID()).Int("set", len(p.Sets[i])).Int("deleted", len(p.Deletes[i])).Msg("cookies written")
		}()
	}
	wg.Wait()

	// 5. Keep the result and persist the jar when it changed.
	s.mu.Lock()
	present := map[Store]bool{}
	for _, st := range s.stores {
		present[st] = true
	}
	s.merges++
	for i, st := range live {
		if present[st] { // not removed meanwhile
			s.last[st] = held[i]
			if inStep[i] {
				s.inStep[st] = s.merges
			}
		}
	}
	s.jar, s.tombs = p.Jar, p.Tombstones
	var werr error
	if p.JarChanged {
		werr = writeJar(s.path, p.Jar, p.Tombstones)
		if werr == nil {
			s.writes++
		}
	}
	s.mu.Unlock()
	if werr != nil {
		errs = append(errs, werr)
	}
	return errors.Join(errs...)
}

// expiring reports whether a jar cookie has expired or a tombstone has
// outlived its TTL at now: then the merge has work even when no browser
// changed. s.mu is held.
func (s *Sync) expiring(now float64) bool {
	for _, c := range s.jar {
		if c.Expired(now) {
			return true
		}
	}
	for _, t := range s.tombs {
		if now-t.At >= tombstoneTTL {
			return true
		}
	}
	return false
}

// sameFP reports whether two fingerprint maps are equal.
func sameFP(a, b map[Key]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, fp := range a {
		if h, ok := b[k]; !ok || h != fp {
			return false
		}
	}
	return true
}

// sortedCookies is the jar in a stable order (for a stable file).
func sortedCookies(jar map[Key]Cookie) []Cookie {
	out := make([]Cookie, 0, len(jar))
	for _, c := range jar {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Domain != b.Domain {
			return a.Domain < b.Domain
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		return a.Partition < b.Partition
	})
	return out
}
