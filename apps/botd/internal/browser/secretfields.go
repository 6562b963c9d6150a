package browser

import (
	"context"
	"math"
	"strings"
	"sync"
	"time"

	cdpapi "github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"

	"github.com/open-bot/computer/apps/botd/internal/cdp"
	"github.com/open-bot/computer/apps/botd/internal/screen"
	"github.com/open-bot/computer/pkg/shared"
)

// The fields that received a secret (issue 36): an elements answer never
// carries their value, and a screenshot shows their box
// painted over while they show their text (a visible secret, or a password
// field the page turned into a text field). They are remembered by page
// session and backend node id, which name one node for the life of its
// document; a field that could not be named makes the whole document count
// (every value left out, the whole viewport painted over) until the page
// loads another document.

// maxSecretFields bounds the fields remembered for one page; past it the
// whole document counts as holding a secret.
const maxSecretFields = 256

// maxSecretPages bounds the pages remembered; past it, pages whose session
// is gone are forgotten.
const maxSecretPages = 64

// secretFields is a browser's memory of the fields that received a secret.
type secretFields struct {
	// mu guards pages.
	mu    sync.Mutex
	pages map[target.SessionID]*secretPage
}

// secretPage is one page session's fields.
type secretPage struct {
	nodes map[cdpapi.BackendNodeID]bool
	// allOf, when set, is the loader id of a document that counts whole.
	allOf cdpapi.LoaderID
}

// secretSet is what one observation leaves out and paints over.
type secretSet struct {
	session target.SessionID
	nodes   map[cdpapi.BackendNodeID]bool
	all     bool
}

func (s *secretSet) has(sess *cdp.Session, id cdpapi.BackendNodeID) bool {
	if s == nil || sess == nil || sess.ID() != s.session {
		return false
	}
	return s.all || s.nodes[id]
}

func (s *secretSet) empty() bool { return s == nil || (!s.all && len(s.nodes) == 0) }

// rememberSecretField records that node of page session s received a
// secret (0: it could not be named, and the whole document counts).
func (b *Browser) rememberSecretField(s *cdp.Session, node cdpapi.BackendNodeID) {
	var loader cdpapi.LoaderID
	if node == 0 {
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		if tree, err := cdpapi.Call(ctx, s, page.GetFrameTree, cdpapi.Empty{}); err == nil && tree.FrameTree != nil && tree.FrameTree.Frame != nil {
			loader = tree.FrameTree.Frame.LoaderID
		}
		cancel()
	}
	b.secrets.mu.Lock()
	defer b.secrets.mu.Unlock()
	if b.secrets.pages == nil {
		b.secrets.pages = map[target.SessionID]*secretPage{}
	}
	if len(b.secrets.pages) >= maxSecretPages {
		live := map[target.SessionID]bool{}
		b.mu.Lock()
		for _, ls := range b.sessions {
			live[ls.ID()] = true
		}
		b.mu.Unlock()
		for id := range b.secrets.pages {
			if !live[id] {
				delete(b.secrets.pages, id)
			}
		}
	}
	p := b.secrets.pages[s.ID()]
	if p == nil {
		p = &secretPage{nodes: map[cdpapi.BackendNodeID]bool{}}
		b.secrets.pages[s.ID()] = p
	}
	switch {
	case node == 0 && loader == "":
		// Not even the document could be named: every document of the
		// page counts (an empty loader id matches none, so keep a marker).
		p.allOf = "*"
	case node == 0:
		p.allOf = loader
	case len(p.nodes) >= maxSecretFields:
		p.allOf = "*"
	default:
		p.nodes[node] = true
	}
}

// secretFieldsOf is what an observation of page session s leaves out and
// paints over (nil: nothing).
func (b *Browser) secretFieldsOf(ctx context.Context, s *cdp.Session) *secretSet {
	b.secrets.mu.Lock()
	p := b.secrets.pages[s.ID()]
	var out *secretSet
	var allOf cdpapi.LoaderID
	if p != nil {
		out = &secretSet{session: s.ID(), nodes: make(map[cdpapi.BackendNodeID]bool, len(p.nodes))}
		for n := range p.nodes {
			out.nodes[n] = true
		}
		allOf = p.allOf
	}
	b.secrets.mu.Unlock()
	if out == nil {
		return nil
	}
	switch allOf {
	case "":
	case "*":
		out.all = true
	default:
		// The whole document counts while it is the one in the page; if
		// the page cannot say, it still counts.
		tree, err := cdpapi.Call(ctx, s, page.GetFrameTree, cdpapi.Empty{})
		if err != nil || tree.FrameTree == nil || tree.FrameTree.Frame == nil || tree.FrameTree.Frame.LoaderID == allOf {
			out.all = true
		}
	}
	if out.empty() {
		return nil
	}
	return out
}

// secretMasks is the screen boxes of the fields of set that show their
// text in the page's documents (the page's clip when it counts whole):
// each field's border box cut by its scrolling ancestors and its
// document's viewport, rounded outward, with a pixel more on each side.
func secretMasks(set *secretSet, docs []*doc, clip rect) []shared.Box {
	if set.empty() {
		return nil
	}
	if set.all {
		return []shared.Box{outward(clip)}
	}
	var out []shared.Box
	for _, d := range docs {
		if d.session == nil || d.session.ID() != set.session {
			continue
		}
		for node := range set.nodes {
			ni, ok := d.byBackend[node]
			if !ok {
				continue
			}
			li := d.layoutOf[ni]
			if li < 0 {
				continue
			}
			if isPassword(d, ni) {
				if ts := strings.TrimSpace(d.style(li, stTextSecurity)); ts != "" && ts != "none" {
					continue // dots
				}
			}
			vis, _ := d.clipOf(ni)
			on := d.toScreen(vis).and(d.clip)
			if on.empty() {
				continue
			}
			out = append(out, outward(on))
		}
	}
	return out
}

// outward rounds a screen rectangle outward to whole pixels, one more on
// each side.
func outward(r rect) shared.Box {
	x0, y0 := int(math.Floor(r.x0))-1, int(math.Floor(r.y0))-1
	x1, y1 := int(math.Ceil(r.x1))+1, int(math.Ceil(r.y1))+1
	return shared.Box{X: x0, Y: y0, W: x1 - x0, H: y1 - y0}
}

// holdsSecrets reports whether any page of the browser has a field that
// received a secret.
func (b *Browser) holdsSecrets() bool {
	b.secrets.mu.Lock()
	defer b.secrets.mu.Unlock()
	return len(b.secrets.pages) > 0
}

var _ screen.SecretMasker = (*Screens)(nil)

// SecretBoxes implements screen.SecretMasker: the boxes of screen id that
// show a secret. When a browser that holds a secret cannot say where it
// shows, the answer is the whole screen.
func (bs *Screens) SecretBoxes(ctx context.Context, id string) ([]shared.Box, error) {
	b, release := bs.runningNow(id)
	if b == nil {
		// Paused (a checkpoint, a takeover) or gone: a page that holds a
		// secret may still be on the screen.
		bs.mu.Lock()
		pb := bs.browsers[id]
		bs.mu.Unlock()
		if pb != nil && pb.holdsSecrets() {
			return []shared.Box{{X: 0, Y: 0, W: pb.o.Width, H: pb.o.Height}}, nil
		}
		return nil, nil
	}
	defer release()
	if !b.holdsSecrets() {
		return nil, nil
	}
	boxes, err := b.SecretBoxes(ctx)
	if err != nil {
		return []shared.Box{{X: 0, Y: 0, W: b.o.Width, H: b.o.Height}}, nil
	}
	return boxes, nil
}
