package httpapi

// Scopes (seed 003) through the API, on both store engines: at most one
// live computer per team, per session and for the account; a second create
// is 409 with the live computer's id and never a capability; GET
// /v1/computers?scope=… finds it; concurrent creates for one scope make
// exactly one computer.

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/open-bot/computer/apps/worker/internal/store"
	"github.com/open-bot/computer/apps/worker/internal/store/storetest"
)

// eachStoreFixture runs fn on a fixture over SQLite and over Postgres (a
// schema of the test's own; skipped without WORKER_TEST_DATABASE_URL,
// failed under CI=true).
func eachStoreFixture(t *testing.T, fn func(t *testing.T, f *fixture)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, newFixture(t)) })
	t.Run("postgres", func(t *testing.T) {
		u := storetest.SchemaURL(t, storetest.DSN(t), "api_")
		st, err := store.OpenPostgres(t.Context(), u)
		require.NoError(t, err)
		fn(t, newFixtureOn(t, t.TempDir(), st))
	})
}

// attachBody is the attach part of a create request for the fixture's botd.
func (f *fixture) attachBody() map[string]any {
	return map[string]any{"url": f.botd.URL, "token": botdTok}
}

type conflict struct {
	Error struct {
		Code, Message, ComputerID string
	} `json:"error"`
	Capability *string `json:"capability"`
}

// scoped lists the live computers of a scope through ?scope=.
func (f *fixture) scoped(t *testing.T, q string) []string {
	t.Helper()
	st, body := f.req(t, "GET", "/v1/computers?scope="+q, token, "", nil)
	require.Equal(t, http.StatusOK, st, body)
	var out struct {
		Computers []struct{ ID string } `json:"computers"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &out))
	ids := []string{}
	for _, c := range out.Computers {
		ids = append(ids, c.ID)
	}
	return ids
}

func TestOneComputerPerScope(t *testing.T) {
	eachStoreFixture(t, func(t *testing.T, f *fixture) {
		att := f.attachBody()
		// requireTaken: a create for a scope with a live computer is 409
		// with that computer's id, and no capability anywhere in it.
		requireTaken := func(body map[string]any, want, wantCap string) {
			t.Helper()
			st, out := f.req(t, "POST", "/v1/computers", opToken, "", body)
			require.Equal(t, http.StatusConflict, st, out)
			var c conflict
			require.NoError(t, json.Unmarshal([]byte(out), &c))
			require.Equal(t, "conflict", c.Error.Code)
			require.Equal(t, want, c.Error.ComputerID, out)
			require.Contains(t, c.Error.Message, want)
			require.Contains(t, c.Error.Message, "operator can adopt it")
			require.Nil(t, c.Capability, out)
			require.NotContains(t, out, wantCap)
		}

		// Two creates for one team: one computer, the second 409 with its id.
		st, team1, teamCap := f.create(t, map[string]any{"scope": map[string]any{"team": "t1", "share": true}, "attach": att})
		require.Equal(t, http.StatusCreated, st)
		require.NotEmpty(t, teamCap)
		requireTaken(map[string]any{"scope": map[string]any{"team": "t1", "share": true}, "attach": att}, team1, teamCap)
		requireTaken(map[string]any{"scope": map[string]any{"team": "t1"}, "kind": "private", "attach": att}, team1, teamCap)
		require.Equal(t, []string{team1}, f.scoped(t, "team:t1"))
		require.Empty(t, f.scoped(t, "team:t2"))
		// GET /v1/computers/{id} carries the provider's description.
		st, body := f.req(t, "GET", "/v1/computers/"+team1, token, teamCap, nil)
		require.Equal(t, http.StatusOK, st, body)
		require.Contains(t, body, `"description":{"kind":"attach","capabilities":{"multiScreen":true,"stop":false,"persistent":true}}`)
		require.Contains(t, body, `"scope":{"team":"t1","share":true}`)
		st, team2, _ := f.create(t, map[string]any{"scope": map[string]any{"team": "t2", "share": true}, "attach": att})
		require.Equal(t, http.StatusCreated, st, "another team has its own")
		require.Equal(t, []string{team2}, f.scoped(t, "team:t2"))

		// The session default is still one computer per session.
		st, s1, s1Cap := f.create(t, map[string]any{"scope": map[string]any{"session": "s1"}, "attach": att})
		require.Equal(t, http.StatusCreated, st)
		requireTaken(map[string]any{"scope": map[string]any{"session": "s1"}, "attach": att}, s1, s1Cap)
		require.Equal(t, []string{s1}, f.scoped(t, "session:s1"))
		st, anon1, _ := f.create(t, map[string]any{"attach": att})
		require.Equal(t, http.StatusCreated, st)
		st, anon2, _ := f.create(t, map[string]any{"attach": att})
		require.Equal(t, http.StatusCreated, st, "no scope: a new session each time")
		require.NotEqual(t, anon1, anon2)

		// One computer for the account.
		st, acct, acctCap := f.create(t, map[string]any{"scope": map[string]any{"account": true}, "attach": att})
		require.Equal(t, http.StatusCreated, st)
		requireTaken(map[string]any{"scope": map[string]any{"account": true}, "attach": att}, acct, acctCap)
		require.Equal(t, []string{acct}, f.scoped(t, "account"))

		// The query form and share are checked.
		for _, q := range []string{"", "team", "team:", "team:../x", "group:t1", "account:x"} {
			st, body := f.req(t, "GET", "/v1/computers?scope="+q, token, "", nil)
			require.Equal(t, http.StatusBadRequest, st, "%q: %s", q, body)
		}
		for _, sc := range []map[string]any{{"session": "s9", "share": true}, {"team": "t9", "share": false}, {"account": true, "share": true}} {
			st, body := f.req(t, "POST", "/v1/computers", opToken, "", map[string]any{"scope": sc, "attach": att})
			require.Equal(t, http.StatusBadRequest, st, "%v: %s", sc, body)
			require.Contains(t, body, "share")
		}

		// A destroyed computer frees its scope.
		st, body = f.req(t, "DELETE", "/v1/computers/"+team1, token, teamCap, nil)
		require.Equal(t, http.StatusOK, st, body)
		require.Empty(t, f.scoped(t, "team:t1"))
		st, again, _ := f.create(t, map[string]any{"scope": map[string]any{"team": "t1"}, "attach": att})
		require.Equal(t, http.StatusCreated, st)
		require.NotEqual(t, team1, again)

		// Concurrent creates for one scope: exactly one wins, every other
		// answer names the winner.
		const n = 6
		type answer struct {
			st       int
			id, body string
		}
		answers := make([]answer, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, body := f.req(t, "POST", "/v1/computers", opToken, "", map[string]any{"scope": map[string]any{"team": "race", "share": true}, "attach": att})
				var c struct {
					Computer struct{ ID string } `json:"computer"`
				}
				_ = json.Unmarshal([]byte(body), &c)
				answers[i] = answer{st, c.Computer.ID, body}
			}()
		}
		wg.Wait()
		var winner string
		for _, a := range answers {
			if a.st == http.StatusCreated {
				require.Empty(t, winner, "two creates won: %+v", answers)
				winner = a.id
			}
		}
		require.NotEmpty(t, winner, "%+v", answers)
		for _, a := range answers {
			if a.st != http.StatusCreated {
				require.Equal(t, http.StatusConflict, a.st, a.body)
				var c conflict
				require.NoError(t, json.Unmarshal([]byte(a.body), &c))
				require.Equal(t, winner, c.Error.ComputerID)
			}
		}
		require.Equal(t, []string{winner}, f.scoped(t, "team:race"))
		all, err := f.st.ListComputers(t.Context())
		require.NoError(t, err)
		n2 := 0
		for _, c := range all {
			if c.ScopeKind == store.ScopeTeam && c.ScopeID == "race" {
				n2++
			}
		}
		require.Equal(t, 1, n2, "the refused creates recorded nothing")
	})
}
