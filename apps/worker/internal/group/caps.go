package group

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/open-bot/computer/apps/worker/internal/capability"
)

// capUpdate is one change on the capability channel: a computer's
// capability hash (32 bytes, base64 in JSON; nil: removed), or a
// dashboard sign-in code's or session's hash (Shared, its expiry in Unix
// ms; 0: dropped).
type capUpdate struct {
	ID     string `json:"id,omitempty"`
	Hash   []byte `json:"hash,omitempty"`
	Shared string `json:"shared,omitempty"`
	Exp    int64  `json:"exp,omitempty"`
	// Home and Scope name a kept home's restore key (Hash; nil: taken or
	// forgotten).
	Home  string `json:"home,omitempty"`
	Scope string `json:"scope,omitempty"`
}

// capSnapshot is every hash a peer holds, for one that joins.
type capSnapshot struct {
	Capabilities map[string][]byte                  `json:"capabilities"`
	Dashboard    map[string]int64                   `json:"dashboard"`
	RestoreKeys  map[string]capability.RestoreEntry `json:"restoreKeys"`
}

// Dashboard is what the group passes between peers of a dashboard: the
// hashes of its sign-in codes and sessions.
type Dashboard interface {
	OnShared(fn func(key string, exp time.Time))
	Shared() map[string]time.Time
	PutShared(key string, exp time.Time)
}

// ShareDashboard makes d's sign-in codes and sessions good on every peer
// (call before Start).
func (g *Group) ShareDashboard(d Dashboard) { g.dash = d }

func expMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// serveCaps is the capability channel: GET copies every hash (a peer
// that joins), POST applies one change.
func (g *Group) serveCaps(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		snap := capSnapshot{Capabilities: g.o.Caps.Snapshot(), Dashboard: map[string]int64{}, RestoreKeys: map[string]capability.RestoreEntry{}}
		if g.o.RestoreKeys != nil {
			snap.RestoreKeys = g.o.RestoreKeys.Snapshot()
		}
		if g.dash != nil {
			for k, exp := range g.dash.Shared() {
				snap.Dashboard[k] = expMs(exp)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(snap)
	case http.MethodPost:
		var u capUpdate
		err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&u)
		switch {
		case err == nil && u.Shared != "" && g.dash != nil:
			g.dash.PutShared(u.Shared, fromMs(u.Exp))
		case err == nil && u.Home != "" && g.o.RestoreKeys != nil && (u.Hash == nil || len(u.Hash) == 32):
			g.o.RestoreKeys.Put(u.Home, u.Scope, u.Hash)
		case err == nil && u.ID != "" && (u.Hash == nil || len(u.Hash) == 32):
			g.o.Caps.Put(u.ID, u.Hash)
		default:
			writeErr(w, http.StatusBadRequest, "bad_request", "want {id, hash: 32 bytes or null} or {shared, exp}")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		writeErr(w, http.StatusMethodNotAllowed, "bad_request", "GET or POST")
	}
}

// peers lists the live members' group addresses but this one's.
func (g *Group) peers(ctx context.Context) ([]string, error) {
	ls, err := g.o.Store.ListLeases(ctx, MemberPrefix)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []string
	for _, l := range ls {
		if l.Key != MemberPrefix+g.id && l.Holder != "" && l.ExpiresAt.After(now) {
			out = append(out, l.Holder)
		}
	}
	return out, nil
}

func (g *Group) peerRequest(ctx context.Context, method, addr string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, addr+capsPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set(TokenHeader, g.o.Token)
	req.Header.Set("Content-Type", "application/json")
	return g.client.Do(req)
}

// announce passes one capability change to every live peer before the
// change's caller goes on (a capability minted here works on any worker
// once its caller has it). A peer that misses it (down) learns the set
// anew when it rejoins.
func (g *Group) announce(id string, hash []byte) {
	g.send(capUpdate{ID: id, Hash: hash}, id)
}

// announceRestore passes a kept home's restore key change on.
func (g *Group) announceRestore(home, scope string, hash []byte) {
	g.send(capUpdate{Home: home, Scope: scope, Hash: hash}, "")
}

// announceShared passes a dashboard sign-in code or session on, as
// announce does a capability.
func (g *Group) announceShared(key string, exp time.Time) {
	g.send(capUpdate{Shared: key, Exp: expMs(exp)}, "")
}

// send posts one change to every live peer, waiting for them (3 s at most).
func (g *Group) send(u capUpdate, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	addrs, err := g.peers(ctx)
	if err != nil {
		g.o.Log.Warn().Err(err).Msg("worker group: list peers to pass a capability change")
		return
	}
	body, _ := json.Marshal(u)
	var wg sync.WaitGroup
	for _, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := g.peerRequest(ctx, http.MethodPost, a, body)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil {
				g.o.Log.Warn().Str("peer", a).Str("computer", id).Err(err).Msg("worker group: a peer did not take a capability change")
			}
		}()
	}
	wg.Wait()
}

// learnCaps copies the capability set from the first live peer that
// answers; with no peer (the first worker of a group) there is nothing to
// learn.
func (g *Group) learnCaps(ctx context.Context) error {
	addrs, err := g.peers(ctx)
	if err != nil {
		return fmt.Errorf("worker group: list peers: %w", err)
	}
	var errs []error
	for _, a := range addrs {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := g.peerRequest(lctx, http.MethodGet, a, nil)
		if err != nil {
			cancel()
			errs = append(errs, err)
			continue
		}
		var snap capSnapshot
		derr := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&snap)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusOK || derr != nil {
			errs = append(errs, fmt.Errorf("peer %s: status %d", a, resp.StatusCode))
			continue
		}
		for id, h := range snap.Capabilities {
			g.o.Caps.Put(id, h)
		}
		if g.dash != nil {
			for k, exp := range snap.Dashboard {
				g.dash.PutShared(k, fromMs(exp))
			}
		}
		if g.o.RestoreKeys != nil {
			for home, e := range snap.RestoreKeys {
				g.o.RestoreKeys.Put(home, e.Scope, e.Hash)
			}
		}
		g.o.Log.Info().Int("capabilities", len(snap.Capabilities)).Int("dashboard", len(snap.Dashboard)).Str("peer", a).Msg("worker group: learned the capabilities from a peer")
		return nil
	}
	if len(addrs) > 0 {
		g.o.Log.Warn().Err(errors.Join(errs...)).Msg("worker group: no live peer gave its capabilities; starting without")
	}
	return nil
}
