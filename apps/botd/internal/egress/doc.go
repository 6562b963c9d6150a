// Package egress is botd's SOCKS5 egress proxy: every browser sends all its
// traffic here and resolves no names itself (Chromium runs with
// --proxy-server=socks5://127.0.0.1:1080 and a resolver rule that maps every
// name to NOTFOUND), so a name is resolved where the connection leaves.
//
// # Modes
//
// EGRESS_MODE=direct (the default) resolves and dials from the computer.
// EGRESS_MODE=tunnel carries every connection over one authenticated
// websocket, botd's GET /egress, to the egress agent on the user's own
// machine (`worker egress --botd URL --token-file FILE`), which resolves and
// dials there. yamux multiplexes the connections over that websocket; each
// stream starts with a small header naming host:port and the agent answers
// one status byte (wire.go), so the client's SOCKS reply says what really
// happened (refused, unreachable, …). While no agent is connected, tunnel
// mode refuses every connection with SOCKS reply 3 (network unreachable)
// and a rate-limited log line: it never falls back to direct. A newer agent
// replaces an older one (a reconnecting agent often arrives before botd has
// noticed its old socket died).
//
// # Health
//
// Health is {mode, agentOnline, tunnelConnected}: tunnelConnected while an
// /egress websocket and its yamux session are up; agentOnline while the
// agent also answers botd's pings (every 15 s; two misses in a row drop the
// tunnel). Both are false in direct mode. Every change is published as an
// "egress" event and recomputed into the health model (so /events also
// carries the new "health").
//
// # go-socks5 and its pitfalls
//
// armon/go-socks5 (2016, unmaintained) does the SOCKS protocol. Its
// pitfalls are handled here: the Resolver returns (ctx, nil, nil), so names
// reach the dialer unresolved; a dialled conn whose LocalAddr is not a
// *net.TCPAddr (a yamux stream) is wrapped, since go-socks5 type-asserts it;
// the handshake has a deadline (lifted once the request is read); our own
// accept loop survives Accept errors and calls ServeConn; both wrappers
// implement CloseWrite, so an EOF becomes a half-close, and the copies are
// ours (through WriteTo): direct mode copies between the two bare sockets
// with 1 MiB buffers during a bulk transfer and nothing done per read
// (measured against socat; splice(2) was slower here). A failed copy (a reset, or the tunnel lost under a stream)
// resets the client instead of closing politely, so a cut transfer never
// looks complete.
//
// # Limits
//
// Handshake timeout 10 s, dial timeout 30 s, idle timeout 5 min (no byte
// either way; direct mode's bytes are seen through the kernel's
// TCP_INFO), at most 1024 client connections (one over the cap is reset at once, with a
// rate-limited warning). Each connection is its own goroutine with its own
// deadlines, and yamux gives each stream its own flow-control window, so one
// slow or stuck target never blocks the others.
//
// # Resets over the tunnel
//
// yamux v0.1.2 cannot reset a single stream, so the first stream of each
// session is a control stream on which either side names a stream to reset
// (wire.go). A target's reset reaches the client as a reset, as in direct
// mode, and a client that hangs up mid-download frees the agent's target
// connection at once instead of leaving it to yamux's close timeout. A lost
// tunnel reaches every client on it as a reset.
package egress
