package vnc

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLinkTokens(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	s := NewSigner(testToken, clock)
	tok, c := s.Mint("alice", ModeControl, "alice-human", 5*time.Minute)
	require.True(t, LooksLikeToken(tok))
	require.NotContains(t, tok, testToken)
	require.Equal(t, now.Add(5*time.Minute), c.Expires)

	got, err := s.Verify(tok, "alice", ModeControl)
	require.NoError(t, err)
	require.Equal(t, "alice-human", got.Holder)

	payload, sig, _ := strings.Cut(strings.TrimPrefix(tok, tokenPrefix), ".")
	forgedPayload := base64.RawURLEncoding.EncodeToString([]byte(`{"s":"alice","m":"control","h":"mallory","e":1900000000,"n":"00"}`))
	other := NewSigner("another-token-0123456789", clock)
	otherTok, _ := other.Mint("alice", ModeControl, "alice-human", time.Minute)

	for name, tc := range map[string]struct {
		tok, screen string
		mode        Mode
	}{
		"other screen":          {tok, "bob", ModeControl},
		"other mode":            {tok, "alice", ModeView},
		"other key":             {otherTok, "alice", ModeControl},
		"payload swapped":       {tokenPrefix + forgedPayload + "." + sig, "alice", ModeControl},
		"signature cut":         {tokenPrefix + payload + ".", "alice", ModeControl},
		"signature flipped":     {tokenPrefix + payload + "." + flip(sig), "alice", ModeControl},
		"no signature":          {tokenPrefix + payload, "alice", ModeControl},
		"empty":                 {"", "alice", ModeControl},
		"the bearer token":      {testToken, "alice", ModeControl},
		"garbage":               {"vt1.!!!.???", "alice", ModeControl},
		"huge":                  {tokenPrefix + strings.Repeat("A", 5000) + "." + sig, "alice", ModeControl},
		"unsigned prefix only":  {tokenPrefix, "alice", ModeControl},
		"prefix and dot":        {tokenPrefix + ".", "alice", ModeControl},
		"other version prefix":  {"vt2." + payload + "." + sig, "alice", ModeControl},
		"whitespace around it":  {" " + tok, "alice", ModeControl},
		"trailing bytes":        {tok + "x", "alice", ModeControl},
		"lowercased signature":  {tokenPrefix + payload + "." + strings.ToLower(sig), "alice", ModeControl},
		"payload with padding":  {tokenPrefix + payload + "==." + sig, "alice", ModeControl},
		"view token as control": {mustMint(s, "alice", ModeView), "alice", ModeControl},
	} {
		_, err := s.Verify(tc.tok, tc.screen, tc.mode)
		require.ErrorIs(t, err, ErrBadToken, name)
	}

	// Expiry: valid until the second it expires, never after.
	now = now.Add(5*time.Minute - time.Second)
	_, err = s.Verify(tok, "alice", ModeControl)
	require.NoError(t, err)
	now = now.Add(time.Second)
	_, err = s.Verify(tok, "alice", ModeControl)
	require.ErrorIs(t, err, ErrBadToken)
}

func mustMint(s *Signer, id string, m Mode) string {
	tok, _ := s.Mint(id, m, "", time.Minute)
	return tok
}

func flip(s string) string {
	b := []byte(s)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	return string(b)
}

// TestSignerRekey: a link signed before Rekey no longer verifies; one
// signed after does, and is what a signer made with the new token signs.
func TestSignerRekey(t *testing.T) {
	const newToken = "computer-token-0123456789abcdef"
	s := NewSigner(testToken, nil)
	before, _ := s.Mint("alice", ModeControl, "alice-human", time.Minute)
	_, err := s.Verify(before, "alice", ModeControl)
	require.NoError(t, err)

	s.Rekey(newToken)
	_, err = s.Verify(before, "alice", ModeControl)
	require.ErrorIs(t, err, ErrBadToken, "a link signed under the old token")
	_, err = s.Parse(before)
	require.ErrorIs(t, err, ErrBadToken)
	after, _ := s.Mint("alice", ModeControl, "alice-human", time.Minute)
	_, err = s.Verify(after, "alice", ModeControl)
	require.NoError(t, err)
	_, err = NewSigner(newToken, nil).Verify(after, "alice", ModeControl)
	require.NoError(t, err, "Rekey derives the key NewSigner would")
	_, err = NewSigner(testToken, nil).Verify(after, "alice", ModeControl)
	require.ErrorIs(t, err, ErrBadToken)
}
