// Package rfb is a VNC client (RFB 3.8, RFC 6143; 3.3 and 3.7 servers too)
// that holds one screen's framebuffer in memory, keeps it current from
// incremental updates and sends pointer and key events in call order.
//
// It is our own because the Go RFB clients we found (mitchellh/go-vnc,
// archived; kward/go-vnc and its forks, without ZRLE; amitbet/vnc2video,
// unmaintained and allocating whatever length a server announces) are either
// unmaintained, lack ZRLE, or have no bound on what a server makes them hold.
//
// Memory is bounded per session: the framebuffer (4·w·h bytes with
// w ≤ MaxWidth and h ≤ MaxHeight), one message's payload (≤ MaxMessage, and
// grown only as its bytes arrive, never from an announced length; while it
// grows the old buffer lives until the copy), the zlib window and decoder
// (under 80 KiB) and fixed buffers (a 64 KiB read buffer, one 16 KiB tile,
// one row of 4·w bytes). Cut text is skipped, never held. A hostile server
// streaming 100 MB at a 1280x800 session grew the heap by 4.7 MiB at most
// (TestGarbageMemoryBounded asserts 16 MiB). A larger framebuffer or
// DesktopSize, a rectangle outside the framebuffer, an unknown encoding or
// message type, a bad ZRLE tile, a truncated message or a payload over
// MaxMessage ends the session; Err says which.
//
// A session never stalls its callers: writes (input and update requests)
// carry a deadline (Options.WriteTimeout, 10 s), and a read that waits on a
// silent server blocks only the session's own read loop.
package rfb
