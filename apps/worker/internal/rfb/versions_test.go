package rfb

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOlderServers: RFB 3.3 (the server picks the security type) and 3.7
// (no SecurityResult after None) handshakes, and a 3.8 server that refuses
// with a reason.
func TestOlderServers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, version string
		security      []byte // what the server sends after the versions
		reply         int    // bytes the client sends back for security
		want          string // "" = a 32x16 session
	}{
		{name: "3.3 none", version: "RFB 003.003\n", security: []byte{0, 0, 0, 1}},
		{name: "3.7 none", version: "RFB 003.007\n", security: []byte{1, 1}, reply: 1},
		{name: "3.5 is 3.3", version: "RFB 003.005\n", security: []byte{0, 0, 0, 1}},
		{name: "3.8 refused", version: "RFB 003.008\n", security: append([]byte{0, 0, 0, 0, 8}, "too many"...), want: `server refused: "too many"`},
		{name: "3.3 refused", version: "RFB 003.003\n", security: append([]byte{0, 0, 0, 0, 0, 0, 0, 4}, "busy"...), want: `server refused: "busy"`},
		{name: "3.8 password needed", version: "RFB 003.008\n", security: []byte{1, 2}, want: "none is set"},
		{name: "not rfb", version: "HTTP/1.1 400", want: "not an RFB 3.x server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan string, 1)
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				br := bufio.NewReader(conn)
				conn.Write([]byte(tc.version))
				v := make([]byte, 12)
				io.ReadFull(br, v)
				got <- string(v)
				conn.Write(tc.security)
				io.ReadFull(br, make([]byte, tc.reply+1)) // security choice, ClientInit
				init := append([]byte{0, 32, 0, 16}, make([]byte, 16)...)
				conn.Write(append(init, 0, 0, 0, 0))
				io.Copy(io.Discard, br)
			}()
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			c, err := Handshake(ctx, conn, Options{})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if w, h := c.Size(); w != 32 || h != 16 {
				t.Fatalf("size %dx%d", w, h)
			}
			if v := <-got; v != strings.Replace(tc.version, "005", "003", 1) {
				t.Fatalf("client answered %q", v)
			}
		})
	}
}

// TestStreamBackoff: redials come 0.25 s, 0.5 s, 1 s apart, State says
// down or connecting with the dial's error, Client stays nil, and Close
// stops the dialling.
func TestStreamBackoff(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var at []time.Time
	dial := func(ctx context.Context) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		return nil, errors.New("dial vnc: refused (test)")
	}
	s := Hold(dial, Options{}, testLogger(t))
	time.Sleep(2 * time.Second)
	if st, e := s.State(); (st != StateDown && st != StateConnecting) || e != "dial vnc: refused (test)" {
		t.Fatalf("state %q %q", st, e)
	}
	if s.Client() != nil {
		t.Fatal("Client() not nil while down")
	}
	s.Close()
	mu.Lock()
	n := len(at)
	gaps := make([]time.Duration, 0, n)
	for i := 1; i < n; i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]))
	}
	mu.Unlock()
	t.Logf("gaps %v", gaps)
	if n != 4 {
		t.Fatalf("%d dials in 2 s, want 4 (at 0, 0.25, 0.75, 1.75 s)", n)
	}
	for i, want := range []time.Duration{250, 500, 1000} {
		want *= time.Millisecond
		if gaps[i] < want || gaps[i] > want+150*time.Millisecond {
			t.Errorf("gap %d is %v, want %v", i, gaps[i], want)
		}
	}
	time.Sleep(400 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(at) != n {
		t.Fatal("dialled after Close")
	}
	if st, _ := s.State(); st != StateDown {
		t.Fatalf("after Close: %s", st)
	}
}
