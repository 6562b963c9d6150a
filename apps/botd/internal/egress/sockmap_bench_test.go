package egress

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// sockmapRelay is a relay with no user space at all in the data path: a
// BPF sk_skb verdict program on a SOCKHASH hands every segment that arrives
// on one socket of a pair straight to the other socket's send side in the
// kernel (the socket-acceleration technique of service meshes). It is a
// ceiling for BenchmarkRelayCeiling, not a part of the product: it needs
// root and BPF, and it moves only the bytes, so it signals readiness with
// one byte once both sockets are in the map (as a SOCKS reply would) and
// leaves the end of the stream to a sink that counts bytes. It returns ""
// when this machine cannot load the program.
func sockmapRelay(b testing.TB, target string) string {
	b.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.SockHash, KeySize: 8, ValueSize: 4, MaxEntries: 1024})
	if err != nil {
		b.Logf("sockmap ceiling left out: %v", err)
		return ""
	}
	b.Cleanup(func() { m.Close() })
	// key = remote_ip4, local_port | remote_port (as __sk_buff holds them:
	// local_port in host order, remote_port in network order << 16).
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:       ebpf.SkSKB,
		License:    "GPL",
		AttachType: ebpf.AttachSkSKBVerdict,
		Instructions: asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1),
			asm.LoadMem(asm.R2, asm.R6, 92, asm.Word), // remote_ip4
			asm.StoreMem(asm.RFP, -8, asm.R2, asm.Word),
			asm.LoadMem(asm.R3, asm.R6, 136, asm.Word), // local_port
			asm.LoadMem(asm.R4, asm.R6, 132, asm.Word), // remote_port
			asm.Or.Reg(asm.R3, asm.R4),
			asm.StoreMem(asm.RFP, -4, asm.R3, asm.Word),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.LoadMapPtr(asm.R2, m.FD()),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, -8),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnSkRedirectHash.Call(),
			asm.JNE.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R0, 1), // no peer: deliver to the socket itself
			asm.Return().WithSymbol("out"),
		},
	})
	if err != nil {
		b.Logf("sockmap ceiling left out: %v", err)
		return ""
	}
	b.Cleanup(func() { prog.Close() })
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: m.FD(), Program: prog, Attach: ebpf.AttachSkSKBVerdict}); err != nil {
		b.Logf("sockmap ceiling left out: %v", err)
		return ""
	}
	key := func(c *net.TCPConn) []byte {
		la, ra := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
		k := make([]byte, 8)
		copy(k[:4], ra.IP.To4())
		var rp [2]byte
		binary.BigEndian.PutUint16(rp[:], uint16(ra.Port))
		binary.LittleEndian.PutUint32(k[4:], uint32(la.Port)|uint32(binary.LittleEndian.Uint16(rp[:]))<<16)
		return k
	}
	fd := func(c *net.TCPConn) (f uint32) {
		rc, _ := c.SyscallConn()
		_ = rc.Control(func(x uintptr) { f = uint32(x) })
		return f
	}
	return relay(b, target, func(a, z *net.TCPConn) {
		if m.Update(key(a), fd(z), ebpf.UpdateAny) != nil || m.Update(key(z), fd(a), ebpf.UpdateAny) != nil {
			return
		}
		defer m.Delete(key(a))
		defer m.Delete(key(z))
		if _, err := a.Write([]byte{1}); err != nil {
			return
		}
		// Both directions run in the kernel now; user space sees only
		// the ends: the client's (ignored: a FIN could overtake
		// segments still queued for the other socket) and the
		// sink's, which has answered by then.
		go func() { _, _ = io.Copy(io.Discard, a) }()
		_, _ = io.Copy(io.Discard, z)
		// The sink's answer may still be queued in the kernel for
		// the client when its FIN arrives: give it time to go out
		// before the close discards it (the clock has stopped by
		// then, at the client's read of the answer).
		time.Sleep(time.Second)
	})
}

// countingSink answers one byte once total bytes have arrived on a
// connection, and closes it.
func countingSink(b testing.TB, total int64) net.Listener {
	b.Helper()
	return serveTCP(b, func(c net.Conn) {
		defer c.Close()
		// 256 KiB reads, as sinkServer's (io.Discard would read 8 KiB at a
		// time and slow the loopback baseline down).
		buf := make([]byte, 256*1024)
		for got := int64(0); got < total; {
			n, err := c.Read(buf[:min(int64(len(buf)), total-got)])
			got += int64(n)
			if err != nil {
				return
			}
		}
		_, _ = c.Write([]byte{1})
	})
}
