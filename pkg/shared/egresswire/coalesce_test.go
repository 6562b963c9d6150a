package egresswire

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
)

// writesConn records each Write as one message.
type writesConn struct {
	net.Conn
	writes [][]byte
}

func (w *writesConn) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func header(typ byte, length uint32) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[1] = typ
	binary.BigEndian.PutUint32(h[4:8], 3)
	binary.BigEndian.PutUint32(h[8:12], length)
	return h
}

func TestCoalesceFrames(t *testing.T) {
	rec := &writesConn{}
	c := CoalesceFrames(rec)
	body := []byte("hello, tunnel")
	// A data frame: header and body become one message.
	if n, err := c.Write(header(yamuxTypeData, uint32(len(body)))); n != yamuxHeaderSize || err != nil {
		t.Fatalf("header: %d %v", n, err)
	}
	if len(rec.writes) != 0 {
		t.Fatalf("a data header went out alone: %d writes", len(rec.writes))
	}
	if n, err := c.Write(body); n != len(body) || err != nil {
		t.Fatalf("body: %d %v", n, err)
	}
	// A window update (type 1) and a bodiless data frame (a FIN) pass at once.
	c.Write(header(1, 1<<20))
	c.Write(header(yamuxTypeData, 0))
	want := [][]byte{append(header(yamuxTypeData, uint32(len(body))), body...), header(1, 1<<20), header(yamuxTypeData, 0)}
	if len(rec.writes) != len(want) {
		t.Fatalf("got %d writes, want %d", len(rec.writes), len(want))
	}
	for i := range want {
		if !bytes.Equal(rec.writes[i], want[i]) {
			t.Fatalf("write %d: got %x, want %x", i, rec.writes[i], want[i])
		}
	}
}
