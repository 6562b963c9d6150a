package vnc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

func handshake38() []byte { return []byte("RFB 003.008\n\x01\x00") }

func be16(v int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(v)) }
func be32(v int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// units splits a stream the way the relay does.
func units(t *testing.T, r io.Reader) ([][]byte, []class, error) {
	t.Helper()
	cs := newClientStream(r)
	var out [][]byte
	var cls []class
	for {
		u, c, err := cs.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return out, cls, err
		}
		out = append(out, append([]byte(nil), u...))
		cls = append(cls, c)
	}
}

func TestClientStreamHandshake(t *testing.T) {
	u, cls, err := units(t, bytes.NewReader(handshake38()))
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("RFB 003.008\n"), {1}, {1}}, u, "the exclusive ClientInit becomes shared")
	require.Equal(t, []class{pass, pass, pass}, cls)

	// 3.3: the server picks the security type; the client sends none.
	u, _, err = units(t, bytes.NewReader([]byte("RFB 003.003\n\x01")))
	require.NoError(t, err)
	require.Len(t, u, 2)

	for name, in := range map[string][]byte{
		"not rfb":       []byte("GET / HTTP/1.1\r\n\r\n"),
		"version 4":     []byte("RFB 004.000\n\x01\x01"),
		"vnc auth":      []byte("RFB 003.008\n\x02"),
		"tight":         []byte("RFB 003.008\n\x10"),
		"binary noise":  {0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, 4, 5, 6, 7, 8},
		"short version": []byte("RFB 003"),
	} {
		_, _, err := units(t, bytes.NewReader(in))
		require.Error(t, err, name)
	}
}

func TestClientStreamMessages(t *testing.T) {
	pf := cat([]byte{0, 0, 0, 0}, []byte{32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0})
	enc := cat([]byte{2, 0}, be16(3), be32(0), be32(7), be32(-223&0xffffffff))
	fbur := cat([]byte{3, 1}, be16(0), be16(0), be16(1280), be16(800))
	key := cat([]byte{4, 1, 0, 0}, be32(0x61))
	ptr := cat([]byte{5, 1}, be16(10), be16(20))
	cut := cat([]byte{6, 0, 0, 0}, be32(5), []byte("hello"))
	extCut := cat([]byte{6, 0, 0, 0}, be32(-4&0xffffffff), []byte{1, 2, 3, 4})
	cont := cat([]byte{150, 1}, be16(0), be16(0), be16(10), be16(10))
	fence := cat([]byte{248, 0, 0, 0}, be32(0), []byte{3, 'a', 'b', 'c'})
	xvp := []byte{250, 0, 1, 2}
	size := cat([]byte{251, 0}, be16(800), be16(600), []byte{1, 0}, make([]byte, 16))
	giiBE := cat([]byte{253, 0x80 | 1}, be16(4), []byte{1, 2, 3, 4})
	giiLE := cat([]byte{253, 1}, []byte{2, 0}, []byte{9, 9})
	qemuKey := cat([]byte{255, 0}, be16(1), be32(0x61), be32(30))
	qemuAudio := cat([]byte{255, 1}, be16(0))
	qemuFmt := cat([]byte{255, 1}, be16(2), []byte{0, 2}, be32(44100))

	msgs := []struct {
		b  []byte
		cl class
	}{
		{pf, pass}, {enc, pass}, {fbur, pass}, {key, input}, {ptr, input}, {cut, input}, {extCut, input},
		{cont, drop}, {fence, drop}, {xvp, drop}, {size, drop}, {giiBE, drop}, {giiLE, drop},
		{qemuKey, input}, {qemuAudio, drop}, {qemuFmt, drop}, {fbur, pass},
	}
	stream := handshake38()
	for _, m := range msgs {
		stream = append(stream, m.b...)
	}
	// Whole, and one byte per read (a message split across websocket frames).
	for _, r := range []io.Reader{bytes.NewReader(stream), iotest.OneByteReader(bytes.NewReader(stream))} {
		u, cls, err := units(t, r)
		require.NoError(t, err)
		require.Len(t, u, 3+len(msgs))
		for i, m := range msgs {
			require.Equal(t, m.b, u[3+i], "message %d", i)
			require.Equal(t, m.cl, cls[3+i], "message %d (type %d)", i, m.b[0])
		}
	}

	for name, bad := range map[string][]byte{
		"unknown type":        {7, 0, 0, 0},
		"type 252":            {252, 0, 0, 0},
		"bad pixel format":    cat([]byte{0, 0, 0, 0}, []byte{33, 24, 0, 1}, make([]byte, 12)),
		"bad true colour":     cat([]byte{0, 0, 0, 0}, []byte{32, 24, 0, 9}, make([]byte, 12)),
		"too many encodings":  cat([]byte{2, 0}, be16(5000)),
		"bad incremental":     cat([]byte{3, 7}, make([]byte, 8)),
		"huge clipboard":      cat([]byte{6, 0, 0, 0}, be32(64<<20)),
		"huge fence":          cat([]byte{248, 0, 0, 0}, be32(0), []byte{200}),
		"many screens":        cat([]byte{251, 0}, be16(1), be16(1), []byte{200, 0}),
		"qemu unknown":        {255, 9, 0, 0},
		"qemu audio unknown":  cat([]byte{255, 1}, be16(7)),
		"truncated key event": {4, 1, 0},
	} {
		_, _, err := units(t, bytes.NewReader(cat(handshake38(), bad)))
		require.Error(t, err, name)
		if name != "truncated key event" {
			require.ErrorIs(t, err, errProtocol, name)
		} else {
			require.ErrorIs(t, err, io.ErrUnexpectedEOF)
		}
	}
}
