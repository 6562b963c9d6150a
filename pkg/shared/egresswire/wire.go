// Package egresswire is the byte format of botd's egress tunnel, spoken by
// botd (apps/botd/internal/egress) and the egress agent
// (apps/worker/egressagent). yamux does the multiplexing; this header only
// says where one stream goes and whether the agent got there.
//
//	botd → agent:  version (1 byte, 1) | length (uint16, big endian) | "host:port"
//	agent → botd:  status (1 byte, one of the Status* values)
//
// After StatusOK the stream carries the connection's bytes both ways; a
// yamux FIN is a TCP half-close.
//
// yamux v0.1.2 cannot reset one stream, so the first stream botd opens is a
// control stream (a header with length 0). Either side writes a stream's id
// on it (uint32, big endian) to reset that stream: the receiver resets its
// own TCP side and closes the stream; the sender waits for that close
// before closing its end, so a FIN can never overtake the reset and pass a
// cut-off transfer for a complete one.
package egresswire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// Version is the header's version byte.
const Version = 1

// MaxAddrLen bounds the "host:port" of a header.
const MaxAddrLen = 1024

// The agent's answers.
const (
	StatusOK       = 0
	StatusFailure  = 1
	StatusRefused  = 2
	StatusHostUnr  = 3
	StatusNetUnr   = 4
	StatusTimedOut = 5
	StatusBadReq   = 6
	// StatusDenied: the agent's policy refuses the target (e.g. its loopback).
	StatusDenied = 7
)

// ErrBadHeader is ReadHeader's answer to a malformed header.
var ErrBadHeader = errors.New("bad stream header")

// ErrControl is ReadHeader's answer for the control stream.
var ErrControl = errors.New("control stream")

// WriteHeader sends the target address at the start of a stream.
func WriteHeader(w io.Writer, addr string) error {
	if len(addr) == 0 || len(addr) > MaxAddrLen {
		return fmt.Errorf("target address length %d out of range", len(addr))
	}
	b := make([]byte, 3+len(addr))
	b[0] = Version
	binary.BigEndian.PutUint16(b[1:3], uint16(len(addr)))
	copy(b[3:], addr)
	_, err := w.Write(b)
	return err
}

// WriteControlHeader opens the control stream.
func WriteControlHeader(w io.Writer) error {
	_, err := w.Write([]byte{Version, 0, 0})
	return err
}

// ReadHeader reads the target address botd asks for (ErrControl for the
// control stream, ErrBadHeader when malformed).
func ReadHeader(r io.Reader) (string, error) {
	var h [3]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", err
	}
	n := int(binary.BigEndian.Uint16(h[1:3]))
	if h[0] == Version && n == 0 {
		return "", ErrControl
	}
	if h[0] != Version || n > MaxAddrLen {
		return "", ErrBadHeader
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	addr := string(b)
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadHeader, err)
	}
	return addr, nil
}

// DialStatus classifies the agent's dial error for botd's SOCKS reply.
func DialStatus(err error) byte {
	var dnsErr *net.DNSError
	var ne net.Error
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, syscall.ECONNREFUSED):
		return StatusRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return StatusNetUnr
	case errors.As(err, &dnsErr), errors.Is(err, syscall.EHOSTUNREACH):
		return StatusHostUnr
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return StatusTimedOut
	default:
		return StatusFailure
	}
}

// ReadStatus reads the agent's one-byte answer and turns a failure into an
// error whose text go-socks5 maps onto the matching SOCKS reply (it looks for
// "refused" and "network is unreachable"; anything else is host unreachable).
func ReadStatus(r io.Reader) error {
	var b [1]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return fmt.Errorf("egress agent gave no answer: %w", err)
	}
	switch b[0] {
	case StatusOK:
		return nil
	case StatusRefused:
		return errors.New("egress agent: connection refused")
	case StatusNetUnr:
		return errors.New("egress agent: network is unreachable")
	case StatusHostUnr:
		return errors.New("egress agent: host unreachable (name or route)")
	case StatusTimedOut:
		return errors.New("egress agent: dial timed out")
	case StatusBadReq:
		return errors.New("egress agent: bad stream header")
	case StatusDenied:
		return errors.New("egress agent: target not allowed by the agent (connection refused)")
	default:
		return fmt.Errorf("egress agent: dial failed (status %d)", b[0])
	}
}

// WriteReset asks the peer to reset stream id.
func WriteReset(w io.Writer, id uint32) error {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], id)
	_, err := w.Write(b[:])
	return err
}

// ReadReset reads the next reset request.
func ReadReset(r io.Reader) (uint32, error) {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(b[:]), nil
}
