package mockmodel

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExchanges: the server records each /v1/responses exchange in order,
// with the call it answered and the outputs the next request carried back,
// and times in order (arrived ≤ read ≤ answered, one exchange after the
// other); a refused request (no key) is not an exchange. ToolLoop asks for
// its tool n times, then answers a message.
func TestExchanges(t *testing.T) {
	var hooked []Exchange
	s := New(ToolLoop("shell", map[string]any{"argv": []string{"true"}}, 1)).RequireKey("k").OnExchange(func(ex Exchange) { hooked = append(hooked, ex) })
	srv := httptest.NewServer(s)
	defer srv.Close()
	ask := func(key string, input ...map[string]any) (int, string) {
		body, _ := json.Marshal(map[string]any{"input": input})
		req, _ := http.NewRequest("POST", srv.URL+"/v1/responses", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	user := map[string]any{"type": "message", "role": "user", "content": "go"}
	code, _ := ask("wrong", user)
	require.Equal(t, http.StatusUnauthorized, code)
	code, first := ask("k", user)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, first, `"name":"shell"`)
	require.Contains(t, first, `"call_id":"call_1"`)
	code, second := ask("k", user,
		map[string]any{"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": `{"argv":["true"]}`},
		map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "ok"})
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.Contains(second, `"type":"message"`) && strings.Contains(second, "done"), second)

	ex := s.Exchanges()
	require.Len(t, ex, 2)
	require.Equal(t, hooked, ex, "the hook saw each exchange")
	require.Equal(t, 1, ex[0].N)
	require.Equal(t, "shell", ex[0].Tool)
	require.Equal(t, "call_1", ex[0].CallID)
	require.Empty(t, ex[0].Outputs)
	require.Equal(t, 2, ex[1].N)
	require.Empty(t, ex[1].Tool, "a message, no call")
	require.Empty(t, ex[1].CallID)
	require.Equal(t, []string{"call_1"}, ex[1].Outputs)
	for i, e := range ex {
		require.False(t, e.Read.Before(e.Arrived), "exchange %d read before it arrived", i)
		require.False(t, e.Answered.Before(e.Read), "exchange %d answered before it was read", i)
	}
	require.True(t, ex[1].Arrived.After(ex[0].Answered), "the second request came after the first answer")
}
