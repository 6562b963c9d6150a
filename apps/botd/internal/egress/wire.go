package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The tunnel's stream header. yamux does the multiplexing; this header only
// says where one stream goes and whether the agent got there. The egress
// agent (apps/worker/egressagent) speaks the same bytes; the end-to-end tests
// in this package run both sides, so a mismatch fails there.
//
//	botd → agent:  version (1 byte, 1) | length (uint16, big endian) | "host:port"
//	agent → botd:  status (1 byte, one of the status* values)
//
// After a status of statusOK the stream carries the connection's bytes both
// ways; a yamux FIN is a TCP half-close.
//
// yamux v0.1.2 cannot reset one stream, so the first stream botd opens is a
// control stream (a header with length 0). Either side writes a stream's id
// on it (uint32, big endian) to reset that stream: the receiver resets its
// own TCP side and closes the stream; the sender waits for that close
// before closing its end, so a FIN can never overtake the reset and pass a
// cut-off transfer for a complete one.
const (
	wireVersion    = 1
	maxAddrLen     = 1024
	statusOK       = 0
	statusFailure  = 1
	statusRefused  = 2
	statusHostUnr  = 3
	statusNetUnr   = 4
	statusTimedOut = 5
	statusBadReq   = 6
)

// writeHeader sends the target address at the start of a stream.
func writeHeader(w io.Writer, addr string) error {
	if len(addr) == 0 || len(addr) > maxAddrLen {
		return fmt.Errorf("target address length %d out of range", len(addr))
	}
	b := make([]byte, 3+len(addr))
	b[0] = wireVersion
	binary.BigEndian.PutUint16(b[1:3], uint16(len(addr)))
	copy(b[3:], addr)
	_, err := w.Write(b)
	return err
}

// readStatus reads the agent's one-byte answer and turns a failure into an
// error whose text go-socks5 maps onto the matching SOCKS reply (it looks for
// "refused" and "network is unreachable"; anything else is host unreachable).
func readStatus(r io.Reader) error {
	var b [1]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return fmt.Errorf("egress agent gave no answer: %w", err)
	}
	switch b[0] {
	case statusOK:
		return nil
	case statusRefused:
		return errors.New("egress agent: connection refused")
	case statusNetUnr:
		return errors.New("egress agent: network is unreachable")
	case statusHostUnr:
		return errors.New("egress agent: host unreachable (name or route)")
	case statusTimedOut:
		return errors.New("egress agent: dial timed out")
	case statusBadReq:
		return errors.New("egress agent: bad stream header")
	default:
		return fmt.Errorf("egress agent: dial failed (status %d)", b[0])
	}
}

// writeControlHeader opens the control stream.
func writeControlHeader(w io.Writer) error {
	_, err := w.Write([]byte{wireVersion, 0, 0})
	return err
}

// writeReset asks the peer to reset stream id.
func writeReset(w io.Writer, id uint32) error {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], id)
	_, err := w.Write(b[:])
	return err
}

// readReset reads the next reset request.
func readReset(r io.Reader) (uint32, error) {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(b[:]), nil
}
