package cookies

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
)

// Key identifies one cookie in a cookie store.
type Key struct {
	Name   string `json:"name"`
	Domain string `json:"domain"`
	Path   string `json:"path"`
	// Partition is the partition key's top-level site ("" when unpartitioned).
	Partition string `json:"partition,omitempty"`
}

// Cookie is one cookie as the jar keeps it.
type Cookie struct {
	Name      string  `json:"name"`
	Value     string  `json:"value"`
	Domain    string  `json:"domain"`
	Path      string  `json:"path"`
	Expires   float64 `json:"expires"` // seconds since the epoch; -1 for a session cookie
	Session   bool    `json:"session"`
	Secure    bool    `json:"secure"`
	HTTPOnly  bool    `json:"httpOnly"`
	SameSite  string  `json:"sameSite,omitempty"`
	Priority  string  `json:"priority,omitempty"`
	Partition string  `json:"partition,omitempty"`
	// CrossSiteAncestor is the partition key's other half.
	CrossSiteAncestor bool `json:"crossSiteAncestor,omitempty"`
}

// Key is c's identity.
func (c Cookie) Key() Key {
	return Key{Name: c.Name, Domain: c.Domain, Path: c.Path, Partition: c.Partition}
}

// Fingerprint is what makes two copies of a cookie the same: value, expiry
// (to the second) and flags. It contains the value, so it is never logged.
func (c Cookie) Fingerprint() string {
	exp := "s"
	if !c.Session {
		exp = strconv.FormatInt(int64(math.Floor(c.Expires)), 10)
	}
	var b strings.Builder
	b.Grow(len(c.Value) + 32)
	b.WriteString(c.Value)
	b.WriteByte(0)
	b.WriteString(exp)
	b.WriteByte(0)
	if c.Secure {
		b.WriteByte('S')
	}
	if c.HTTPOnly {
		b.WriteByte('H')
	}
	b.WriteByte(0)
	b.WriteString(c.SameSite)
	return b.String()
}

// Expired reports whether a persistent cookie's expiry has passed at now
// (seconds since the epoch).
func (c Cookie) Expired(now float64) bool {
	return !c.Session && c.Expires > 0 && c.Expires <= now
}

// FromNetwork converts a cookie read over DevTools.
func FromNetwork(n *network.Cookie) Cookie {
	c := Cookie{
		Name: n.Name, Value: n.Value, Domain: n.Domain, Path: n.Path,
		Expires: n.Expires, Session: n.Session, Secure: n.Secure, HTTPOnly: n.HTTPOnly,
		SameSite: string(n.SameSite), Priority: string(n.Priority),
	}
	if c.Session {
		c.Expires = -1
	}
	if n.PartitionKey != nil {
		c.Partition = n.PartitionKey.TopLevelSite
		c.CrossSiteAncestor = n.PartitionKey.HasCrossSiteAncestor
	}
	return c
}

// Param is the DevTools parameter that stores c. A host-only cookie (its
// domain has no leading dot) is set through a URL, so it stays host-only and
// keeps its key; a domain cookie is set through its domain.
func (c Cookie) Param() *network.CookieParam {
	p := &network.CookieParam{
		Name: c.Name, Value: c.Value, Path: c.Path,
		Secure: c.Secure, HTTPOnly: c.HTTPOnly,
		SameSite: network.CookieSameSite(c.SameSite), Priority: network.CookiePriority(c.Priority),
	}
	if strings.HasPrefix(c.Domain, ".") {
		p.Domain = c.Domain
	} else {
		scheme := "http://"
		if c.Secure {
			scheme = "https://"
		}
		path := c.Path
		if path == "" {
			path = "/"
		}
		p.URL = scheme + c.Domain + path
	}
	if !c.Session && c.Expires > 0 {
		p.Expires = cdp.TimeSinceEpoch(c.Expires)
	}
	if c.Partition != "" {
		p.PartitionKey = &network.CookiePartitionKey{TopLevelSite: c.Partition, HasCrossSiteAncestor: c.CrossSiteAncestor}
	}
	return p
}

// DeleteParam is a parameter that deletes c: the same cookie, expired.
func (c Cookie) DeleteParam() *network.CookieParam {
	d := c
	d.Session = false
	d.Expires = 1 // 1970: already expired
	d.Value = "deleted"
	return d.Param()
}

// change is what one browser did to one cookie since the last sync.
type change struct {
	store   int
	key     Key
	removed bool
	cookie  Cookie // the new copy (when not removed)
	lastFP  string // the fingerprint the browser held before
}

// Plan is the outcome of one merge: the new jar and, per store, what to
// write into it.
type Plan struct {
	Jar map[Key]Cookie
	// Sets and Deletes are indexed like the stores given to merge.
	Sets    [][]Cookie
	Deletes [][]Cookie
	// Held is, per store, what it will hold once the writes land (the next
	// sync's "last"). The maps may be shared between stores: read only.
	Held []map[Key]string
	// JarChanged says the jar must be persisted.
	JarChanged bool
	// Tombstones are the sign-outs, remembered so that a browser that
	// starts later with the old cookie does not bring it back.
	Tombstones map[Key]Tombstone
}

// Tombstone remembers a deleted cookie by a hash of its last fingerprint
// (never the value itself).
type Tombstone struct {
	FP string  `json:"fp"`
	At float64 `json:"at"`
}

// hashFP is the form of a fingerprint a tombstone keeps.
func hashFP(fp string) string {
	h := sha256.Sum256([]byte(fp))
	return hex.EncodeToString(h[:])
}

// tombstoneTTL is how long a sign-out is remembered (seconds).
const tombstoneTTL = 30 * 24 * 3600

// merge is one CookieSync step without I/O. jar is the shared jar; cur is
// what each store holds now; last is what each held after the previous sync
// (nil for a store seen for the first time); now is the time in seconds.
//
// The rules (seed "Shared sign-ins"):
//   - a cookie that is new or whose fingerprint changed in a store since the
//     last sync is a change, and goes into the jar (a sign-in anywhere wins);
//   - a cookie that disappeared from a store is a sign-out only while the jar
//     still holds the same fingerprint the store had, and nobody set it in
//     this round; then it is deleted everywhere. Otherwise it was a stale
//     copy, and the jar's copy is written back;
//   - a store seen for the first time brings only cookies the jar does not
//     know (and that were not signed out): the jar wins over its old copies;
//   - expired cookies leave the jar;
//   - every store is then brought to the jar's state.
func merge(jar map[Key]Cookie, tombs map[Key]Tombstone, cur []map[Key]Cookie, last []map[Key]string, now float64) Plan {
	return mergeFP(jar, tombs, cur, nil, last, now)
}

// fingerprints maps each cookie of a store to its fingerprint.
func fingerprints(held map[Key]Cookie) map[Key]string {
	fp := make(map[Key]string, len(held))
	for k, c := range held {
		fp[k] = c.Fingerprint()
	}
	return fp
}

// mergeFP is merge given the stores' fingerprints (curFP[i] is
// fingerprints(cur[i]); a nil or missing one is computed here). Sync
// computes each as its browser answers, while slower ones still work.
func mergeFP(jar map[Key]Cookie, tombs map[Key]Tombstone, cur []map[Key]Cookie, curFP []map[Key]string, last []map[Key]string, now float64) Plan {
	p := Plan{Jar: make(map[Key]Cookie, len(jar)), Tombstones: make(map[Key]Tombstone, len(tombs))}
	for k, c := range jar {
		p.Jar[k] = c
	}
	for k, t := range tombs {
		if now-t.At < tombstoneTTL {
			p.Tombstones[k] = t
		} else {
			p.JarChanged = true
		}
	}

	// Each cookie's fingerprint is computed once per round: a steady round
	// compares every store's ~1,000 cookies twice.
	heldFP := make([]map[Key]string, len(cur))
	var sets, removes []change
	for i, held := range cur {
		var hfp map[Key]string
		if i < len(curFP) {
			hfp = curFP[i]
		}
		if hfp == nil {
			hfp = fingerprints(held)
		}
		heldFP[i] = hfp
		prev := last[i]
		if prev == nil {
			// First sight: pretend it held what the jar or a sign-out knows,
			// so only cookies new to the jar count as its changes.
			prev = make(map[Key]string, len(held))
			for k, fp := range hfp {
				if _, ok := p.Jar[k]; ok {
					prev[k] = fp
				} else if t, ok := p.Tombstones[k]; ok && t.FP == hashFP(fp) {
					prev[k] = fp
				}
			}
		}
		for k, c := range held {
			if fp, ok := prev[k]; !ok || fp != hfp[k] {
				sets = append(sets, change{store: i, key: k, cookie: c})
			}
		}
		for k, fp := range prev {
			if _, ok := held[k]; !ok {
				removes = append(removes, change{store: i, key: k, removed: true, lastFP: fp})
			}
		}
	}

	// Sign-ins first: when two stores changed the same cookie in one round,
	// the copy that lives longest wins (then the lowest store index).
	sort.SliceStable(sets, func(a, b int) bool { return sets[a].store < sets[b].store })
	setNow := map[Key]bool{}
	for _, ch := range sets {
		if ch.cookie.Expired(now) {
			continue
		}
		if setNow[ch.key] {
			if old := p.Jar[ch.key]; !longer(ch.cookie, old) {
				continue
			}
		}
		setNow[ch.key] = true
		if old, ok := p.Jar[ch.key]; !ok || old.Fingerprint() != ch.cookie.Fingerprint() || old != ch.cookie {
			p.Jar[ch.key] = ch.cookie
			p.JarChanged = true
		}
		delete(p.Tombstones, ch.key)
	}
	// Then sign-outs: only a removal of the very copy the jar holds counts.
	for _, ch := range removes {
		if setNow[ch.key] {
			continue
		}
		jc, ok := p.Jar[ch.key]
		if !ok || jc.Fingerprint() != ch.lastFP {
			continue
		}
		delete(p.Jar, ch.key)
		p.Tombstones[ch.key] = Tombstone{FP: hashFP(ch.lastFP), At: now}
		p.JarChanged = true
	}
	for k, c := range p.Jar {
		if c.Expired(now) {
			delete(p.Jar, k)
			p.JarChanged = true
		}
	}

	// Bring every store to the jar. Once the writes land every store holds
	// the jar, so they all share one read-only map of its fingerprints.
	jarFP := make(map[Key]string, len(p.Jar))
	for k, c := range p.Jar {
		jarFP[k] = c.Fingerprint()
	}
	p.Sets = make([][]Cookie, len(cur))
	p.Deletes = make([][]Cookie, len(cur))
	p.Held = make([]map[Key]string, len(cur))
	for i, held := range cur {
		hfp := heldFP[i]
		for k, fp := range jarFP {
			if h, ok := hfp[k]; !ok || h != fp {
				p.Sets[i] = append(p.Sets[i], p.Jar[k])
			}
		}
		for k, c := range held {
			if _, ok := p.Jar[k]; !ok && !c.Expired(now) {
				p.Deletes[i] = append(p.Deletes[i], c)
			}
		}
		p.Held[i] = jarFP
	}
	return p
}

// longer reports whether a outlives b (a session cookie outlives nothing).
func longer(a, b Cookie) bool {
	if a.Session {
		return false
	}
	if b.Session {
		return true
	}
	return a.Expires > b.Expires
}
