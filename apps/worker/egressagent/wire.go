package egressagent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// The stream header, the same bytes as botd's (apps/botd/internal/egress,
// wire.go); botd's end-to-end tests run this agent, so a mismatch fails there.
//
//	botd → agent:  version (1 byte, 1) | length (uint16, big endian) | "host:port"
//	agent → botd:  status (1 byte)
//
// After statusOK the stream carries the connection's bytes both ways; a
// yamux FIN is a TCP half-close.
//
// The first stream botd opens is the control stream (a header with length
// 0). Either side writes a stream's id on it (uint32, big endian) to reset
// that stream: the receiver resets its own TCP side and closes the stream;
// the sender waits for that close before closing its end, so a FIN never
// overtakes the reset (yamux v0.1.2 cannot reset one stream itself).
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
	statusDenied   = 7
)

var errBadHeader = errors.New("bad stream header")

// errControl is readHeader's answer for the control stream.
var errControl = errors.New("control stream")

// readHeader reads the target address botd asks for.
func readHeader(r io.Reader) (string, error) {
	var h [3]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", err
	}
	n := int(binary.BigEndian.Uint16(h[1:3]))
	if h[0] == wireVersion && n == 0 {
		return "", errControl
	}
	if h[0] != wireVersion || n > maxAddrLen {
		return "", errBadHeader
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	addr := string(b)
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("%w: %v", errBadHeader, err)
	}
	return addr, nil
}

// dialStatus classifies a dial error for botd's SOCKS reply.
func dialStatus(err error) byte {
	var dnsErr *net.DNSError
	var ne net.Error
	switch {
	case err == nil:
		return statusOK
	case errors.Is(err, syscall.ECONNREFUSED):
		return statusRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return statusNetUnr
	case errors.As(err, &dnsErr), errors.Is(err, syscall.EHOSTUNREACH):
		return statusHostUnr
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return statusTimedOut
	default:
		return statusFailure
	}
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
