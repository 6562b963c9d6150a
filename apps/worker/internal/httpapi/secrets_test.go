package httpapi

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVaultRoutes: the vault's routes need the computer's capability; a
// value goes in and never comes out (answers, listing, errors, the access
// log), and is sealed in the database file; names and origins are checked.
func TestVaultRoutes(t *testing.T) {
	f := newFixture(t)
	attach := f.attachBody()
	st, id, capa := f.create(t, map[string]any{"scope": map[string]any{"team": "vault"}, "attach": attach})
	require.Equal(t, http.StatusCreated, st)
	st, id2, cap2 := f.create(t, map[string]any{"scope": map[string]any{"team": "other"}, "attach": attach})
	require.Equal(t, http.StatusCreated, st)
	const value = "Vault-Value-7f3c9e1a-correct horse"
	path := "/v1/computers/" + id + "/secrets"

	// Without the computer's capability: 404, as if it did not exist.
	for _, c := range []string{"", "garbage", cap2} {
		st, _ := f.req(t, "POST", path, token, c, map[string]string{"name": "bank", "origin": "https://bank.example", "value": value})
		require.Equal(t, http.StatusNotFound, st)
		st, _ = f.req(t, "GET", path, token, c, nil)
		require.Equal(t, http.StatusNotFound, st)
	}
	st, _ = f.req(t, "POST", path, "", capa, map[string]string{"name": "bank", "origin": "https://bank.example", "value": value})
	require.Equal(t, http.StatusUnauthorized, st)

	st, body := f.req(t, "POST", path, token, capa, map[string]string{"name": "bank", "origin": "HTTPS://Bank.Example:443/", "value": value})
	require.Equal(t, http.StatusCreated, st, body)
	require.JSONEq(t, `{"secret":{"name":"bank","origin":"https://bank.example"}}`, body)
	st, body = f.req(t, "POST", path, token, capa, map[string]string{"name": "local", "origin": "http://127.0.0.1:8080", "value": value + "-2"})
	require.Equal(t, http.StatusCreated, st, body)
	st, body = f.req(t, "POST", path, token, capa, map[string]string{"name": "bank", "origin": "https://bank.example", "value": value + "-3"})
	require.Equal(t, http.StatusOK, st, "the same name replaces: %s", body)

	st, body = f.req(t, "GET", path, token, capa, nil)
	require.Equal(t, http.StatusOK, st)
	require.JSONEq(t, `{"secrets":[{"name":"bank","origin":"https://bank.example"},{"name":"local","origin":"http://127.0.0.1:8080"}]}`, body)
	st, body = f.req(t, "GET", "/v1/computers/"+id2+"/secrets", token, cap2, nil)
	require.Equal(t, http.StatusOK, st)
	require.JSONEq(t, `{"secrets":[]}`, body, "a secret belongs to one computer")
	st, body = f.req(t, "GET", "/v1/computers/"+id, token, capa, nil)
	require.Equal(t, http.StatusOK, st)
	require.NotContains(t, body, value)

	bad := []struct {
		name string
		body any
		want string
	}{
		{"name with a slash", map[string]string{"name": "../x", "origin": "https://a.example", "value": value}, "name"},
		{"empty name", map[string]string{"name": "", "origin": "https://a.example", "value": value}, "name"},
		{"long name", map[string]string{"name": strings.Repeat("n", 65), "origin": "https://a.example", "value": value}, "name"},
		{"http off loopback", map[string]string{"name": "a", "origin": "http://a.example", "value": value}, "only on loopback"},
		{"path", map[string]string{"name": "a", "origin": "https://a.example/login", "value": value}, "no user, path"},
		{"query", map[string]string{"name": "a", "origin": "https://a.example?x=1", "value": value}, "no user, path"},
		{"fragment", map[string]string{"name": "a", "origin": "https://a.example#x", "value": value}, "no user, path"},
		{"user", map[string]string{"name": "a", "origin": "https://u@a.example", "value": value}, "no user, path"},
		{"scheme", map[string]string{"name": "a", "origin": "ftp://a.example", "value": value}, "scheme must be https"},
		{"javascript", map[string]string{"name": "a", "origin": "javascript:alert(1)", "value": value}, "origin"},
		{"no scheme", map[string]string{"name": "a", "origin": "a.example", "value": value}, "origin"},
		{"wildcard", map[string]string{"name": "a", "origin": "https://*.a.example", "value": value}, "not a host name"},
		{"port zero", map[string]string{"name": "a", "origin": "https://a.example:0", "value": value}, "port"},
		{"unicode host", map[string]string{"name": "a", "origin": "https://bänk.example", "value": value}, "xn--"},
		{"empty value", map[string]string{"name": "a", "origin": "https://a.example", "value": ""}, "value is required"},
		{"newline", map[string]string{"name": "a", "origin": "https://a.example", "value": value + "\n"}, "control characters"},
		{"long value", map[string]string{"name": "a", "origin": "https://a.example", "value": strings.Repeat("v", 4097)}, "at most"},
		{"unknown field", map[string]string{"name": "a", "origin": "https://a.example", "value": value, "note": "x"}, "invalid JSON"},
	}
	for _, tc := range bad {
		st, body := f.req(t, "POST", path, token, capa, tc.body)
		require.Equal(t, http.StatusBadRequest, st, "%s: %s", tc.name, body)
		require.Contains(t, body, tc.want, tc.name)
		require.NotContains(t, body, value, tc.name)
	}
	// A malformed body is refused without quoting it.
	st, body = rawBody(t, f, "POST", path, capa, `{"name":"a","origin":"https://a.example","value":"`+value+`\q"}`)
	require.Equal(t, http.StatusBadRequest, st)
	require.NotContains(t, body, "q")
	require.NotContains(t, body, value)

	st, body = f.req(t, "DELETE", path+"/local", token, capa, nil)
	require.Equal(t, http.StatusOK, st, body)
	st, _ = f.req(t, "DELETE", path+"/local", token, capa, nil)
	require.Equal(t, http.StatusNotFound, st)
	st, _ = f.req(t, "DELETE", path+"/bank", token, cap2, nil)
	require.Equal(t, http.StatusNotFound, st, "another computer's capability deletes nothing")
	st, body = f.req(t, "GET", path, token, capa, nil)
	require.Equal(t, http.StatusOK, st)
	require.JSONEq(t, `{"secrets":[{"name":"bank","origin":"https://bank.example"}]}`, body)

	// Sealed at rest: no value in the database files; never in the log.
	for _, name := range []string{"worker.db", "worker.db-wal"} {
		b, err := os.ReadFile(filepath.Join(f.dir, name))
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		require.False(t, strings.Contains(string(b), "Vault-Value-7f3c9e1a"), "%s holds a value in clear", name)
	}
	require.Contains(t, f.logs.String(), `"path":"/v1/computers/`+id+`/secrets"`)
	require.NotContains(t, f.logs.String(), "Vault-Value-7f3c9e1a")

	// A destroyed computer's vault is gone from the database.
	st, body = f.req(t, "DELETE", "/v1/computers/"+id, token, capa, nil)
	require.Equal(t, http.StatusOK, st, body)
	left, err := f.st.ListSecrets(t.Context(), id)
	require.NoError(t, err)
	require.Empty(t, left)
}

func rawBody(t *testing.T, f *fixture, method, path, capa, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, f.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-Computer-Capability", capa)
	resp, err := f.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, string(out)
}
