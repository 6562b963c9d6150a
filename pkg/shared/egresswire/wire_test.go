package egresswire

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHeaderRoundTrip(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteHeader(&b, "example.com:443"))
	addr, err := ReadHeader(&b)
	require.NoError(t, err)
	require.Equal(t, "example.com:443", addr)

	b.Reset()
	require.NoError(t, WriteControlHeader(&b))
	_, err = ReadHeader(&b)
	require.ErrorIs(t, err, ErrControl)

	require.Error(t, WriteHeader(&b, ""))
	require.Error(t, WriteHeader(&b, strings.Repeat("a", MaxAddrLen+1)))
	for _, in := range [][]byte{{2, 0, 3, 'a', ':', '1'}, {1, 0xff, 0xff}, {1, 0, 4, 'n', 'o', 'p', 'e'}} {
		_, err := ReadHeader(bytes.NewReader(in))
		require.Error(t, err, "%v", in)
	}
}

func TestStatuses(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want byte
		text string
	}{
		{nil, StatusOK, ""},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, StatusRefused, "refused"},
		{&net.OpError{Op: "dial", Err: syscall.ENETUNREACH}, StatusNetUnr, "network is unreachable"},
		{&net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}, StatusHostUnr, "host unreachable"},
		{context.DeadlineExceeded, StatusTimedOut, "timed out"},
		{errors.New("odd"), StatusFailure, "dial failed"},
	} {
		s := DialStatus(tc.err)
		require.Equal(t, tc.want, s, "%v", tc.err)
		err := ReadStatus(bytes.NewReader([]byte{s}))
		if tc.text == "" {
			require.NoError(t, err)
		} else {
			require.ErrorContains(t, err, tc.text)
		}
	}
	require.ErrorContains(t, ReadStatus(bytes.NewReader([]byte{StatusDenied})), "not allowed")
	require.Error(t, ReadStatus(bytes.NewReader(nil)))

	var b bytes.Buffer
	require.NoError(t, WriteReset(&b, 0xdeadbeef))
	id, err := ReadReset(&b)
	require.NoError(t, err)
	require.Equal(t, uint32(0xdeadbeef), id)
}
