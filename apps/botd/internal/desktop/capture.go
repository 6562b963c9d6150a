package desktop

import (
	"context"
	"encoding/binary"
	"fmt"
	"github.com/open-bot/computer/pkg/shared/jpegenc"
	"hash/maphash"
	"image"

	"github.com/BurntSushi/xgb"
	"github.com/BurntSushi/xgb/shm"
	"github.com/BurntSushi/xgb/xfixes"
	"github.com/BurntSushi/xgb/xproto"
	"golang.org/x/sys/unix"
)

// JPEGQuality is the quality of every screenshot.
const JPEGQuality = 72

// Frame is one screenshot.
type Frame struct {
	// JPEG is the image (quality 72, pointer drawn in); nil when
	// CaptureIfChanged found the frame unchanged.
	JPEG          []byte
	Width, Height int
	// Pointer is where the pointer is, in screen pixels.
	Pointer image.Point
	// Hash identifies the raw pixels, the pointer position and the cursor
	// shape, so an unchanged screen is detected without encoding. It is
	// stable within one botd process only.
	Hash uint64
}

// hashSeed is fixed per process so hashes compare across Desktops.
var hashSeed = maphash.MakeSeed()

// captureState is the capture side of a Desktop: the shared-memory segment
// attached to the current session and the JPEG encoder.
type captureState struct {
	owner *session // the session seg is attached on; nil = none
	noShm bool     // MIT-SHM failed on owner: use plain GetImage
	seg   shm.Seg
	buf   []byte // our mapping of the segment
	enc   jpegenc.Encoder
}

// release detaches our mapping. The X side goes with its connection; the
// segment itself was marked IPC_RMID when attached, so it is freed once
// both sides let go.
func (c *captureState) release() {
	if c.buf != nil {
		_ = unix.SysvShmDetach(c.buf)
		c.buf = nil
	}
	c.owner = nil
	c.noShm = false
}

// Capture grabs the screen with the pointer drawn in, as JPEG q72.
func (d *Desktop) Capture(ctx context.Context) (Frame, error) {
	f, _, err := d.capture(ctx, 0, false)
	return f, err
}

// CaptureIfChanged captures like Capture, but when the frame's hash equals
// prevHash it skips the encoding and returns the frame without JPEG and
// changed=false.
func (d *Desktop) CaptureIfChanged(ctx context.Context, prevHash uint64) (Frame, bool, error) {
	return d.capture(ctx, prevHash, true)
}

func (d *Desktop) capture(ctx context.Context, prev uint64, skipSame bool) (_ Frame, _ bool, err error) {
	defer d.guard("capture", &err)
	d.capMu.Lock()
	defer d.capMu.Unlock()
	s, err := d.session(ctx)
	if err != nil {
		return Frame{}, false, fmt.Errorf("capture: %w", err)
	}
	if d.cap.owner != s {
		d.cap.release()
		d.cap.owner = s
		if s.hasShm {
			if err := d.attachShm(ctx, s); err != nil {
				d.log.Warn().Err(err).Msg("MIT-SHM unavailable, capturing with plain GetImage")
				d.cap.noShm = true
			}
		} else {
			d.cap.noShm = true
		}
	}
	w, h := s.width, s.height
	// The X call below may outlive this function (a dead or hung server):
	// it gets copies, never d.cap itself.
	noShm, seg, shmBuf := d.cap.noShm, d.cap.seg, d.cap.buf
	var pix []byte
	var cur *xfixes.GetCursorImageReply
	var ptr image.Point
	err = s.do(ctx, callTimeout, "capture", func(c *xgb.Conn) error {
		// Send both requests before waiting: one round trip, not two.
		var shmCookie shm.GetImageCookie
		var plainCookie xproto.GetImageCookie
		if noShm {
			plainCookie = xproto.GetImage(c, xproto.ImageFormatZPixmap, xproto.Drawable(s.root), 0, 0, uint16(w), uint16(h), 0xffffffff)
		} else {
			shmCookie = shm.GetImage(c, xproto.Drawable(s.root), 0, 0, uint16(w), uint16(h), 0xffffffff, xproto.ImageFormatZPixmap, seg, 0)
		}
		var curCookie xfixes.GetCursorImageCookie
		var ptrCookie xproto.QueryPointerCookie
		if s.hasXfixes {
			curCookie = xfixes.GetCursorImage(c)
		} else {
			ptrCookie = xproto.QueryPointer(c, xproto.Window(s.root))
		}
		if noShm {
			r, err := plainCookie.Reply()
			if err != nil {
				return err
			}
			pix = r.Data
		} else {
			if _, err := shmCookie.Reply(); err != nil {
				return err
			}
			pix = shmBuf
		}
		if s.hasXfixes {
			r, err := curCookie.Reply()
			if err != nil {
				return err
			}
			cur = r
			ptr = image.Pt(int(r.X), int(r.Y))
		} else {
			r, err := ptrCookie.Reply()
			if err != nil {
				return err
			}
			ptr = image.Pt(int(r.RootX), int(r.RootY))
		}
		return nil
	})
	if err != nil {
		return Frame{}, false, err
	}
	stride := w * 4
	if len(pix) < stride*h {
		return Frame{}, false, fmt.Errorf("capture: %d bytes for %dx%d; only 32 bits per pixel is supported", len(pix), w, h)
	}
	pix = pix[:stride*h]
	f := Frame{Width: w, Height: h, Pointer: ptr, Hash: frameHash(pix, ptr, cur)}
	if skipSame && f.Hash == prev {
		return f, false, nil
	}
	if cur != nil {
		drawCursor(pix, w, h, cur)
	}
	jpg, err := d.cap.enc.Encode(pix, w, h, stride, JPEGQuality)
	if err != nil {
		return Frame{}, false, fmt.Errorf("capture: encode: %w", err)
	}
	f.JPEG = jpg
	return f, true, nil
}

// attachShm creates a SysV segment for one frame, hands it to the X server
// and marks it for removal at once, so it never outlives us. The X server
// runs as the target user: the segment is given to that user (mode 0600) so
// the server can attach it and nobody else can.
func (d *Desktop) attachShm(ctx context.Context, s *session) error {
	size := s.width * s.height * 4
	id, err := unix.SysvShmGet(unix.IPC_PRIVATE, size, unix.IPC_CREAT|0o600)
	if err != nil {
		return fmt.Errorf("shmget: %w", err)
	}
	defer func() { _, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil) }()
	if d.t.User != nil && d.t.User.UID != 0 {
		var ds unix.SysvShmDesc
		if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &ds); err != nil {
			return fmt.Errorf("shmctl stat: %w", err)
		}
		ds.Perm.Uid = d.t.User.UID
		ds.Perm.Gid = d.t.User.GID
		if _, err := unix.SysvShmCtl(id, unix.IPC_SET, &ds); err != nil {
			return fmt.Errorf("shmctl set: %w", err)
		}
	}
	buf, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		return fmt.Errorf("shmat: %w", err)
	}
	err = s.do(ctx, callTimeout, "shm attach", func(c *xgb.Conn) error {
		seg, err := shm.NewSegId(c)
		if err != nil {
			return err
		}
		if err := shm.AttachChecked(c, seg, uint32(id), false).Check(); err != nil {
			return err
		}
		d.cap.seg = seg
		return nil
	})
	if err != nil {
		_ = unix.SysvShmDetach(buf)
		return err
	}
	d.cap.buf = buf
	return nil
}

// frameHash hashes the raw pixels (before the cursor is drawn), the pointer
// position and the cursor shape.
func frameHash(pix []byte, ptr image.Point, cur *xfixes.GetCursorImageReply) uint64 {
	var h maphash.Hash
	h.SetSeed(hashSeed)
	_, _ = h.Write(pix)
	var tail [16]byte
	binary.LittleEndian.PutUint32(tail[0:], uint32(int32(ptr.X)))
	binary.LittleEndian.PutUint32(tail[4:], uint32(int32(ptr.Y)))
	if cur != nil {
		binary.LittleEndian.PutUint32(tail[8:], cur.CursorSerial)
		binary.LittleEndian.PutUint16(tail[12:], cur.Xhot)
		binary.LittleEndian.PutUint16(tail[14:], cur.Yhot)
	}
	_, _ = h.Write(tail[:])
	return h.Sum64()
}

// drawCursor composites the XFixes cursor image (premultiplied ARGB) onto a
// BGRX frame at the pointer, clipped to the screen.
func drawCursor(pix []byte, w, h int, cur *xfixes.GetCursorImageReply) {
	cw, ch := int(cur.Width), int(cur.Height)
	if len(cur.CursorImage) < cw*ch {
		return
	}
	x0 := int(cur.X) - int(cur.Xhot)
	y0 := int(cur.Y) - int(cur.Yhot)
	for cy := 0; cy < ch; cy++ {
		y := y0 + cy
		if y < 0 || y >= h {
			continue
		}
		for cx := 0; cx < cw; cx++ {
			x := x0 + cx
			if x < 0 || x >= w {
				continue
			}
			p := cur.CursorImage[cy*cw+cx]
			a := p >> 24
			if a == 0 {
				continue
			}
			o := (y*w + x) * 4
			inv := 255 - a
			pix[o+0] = blend(p&0xff, pix[o+0], inv)
			pix[o+1] = blend((p>>8)&0xff, pix[o+1], inv)
			pix[o+2] = blend((p>>16)&0xff, pix[o+2], inv)
		}
	}
}

// blend is premultiplied "over": src + dst*(1-a).
func blend(src uint32, dst byte, inv uint32) byte {
	v := src + (uint32(dst)*inv+127)/255
	if v > 255 {
		v = 255
	}
	return byte(v)
}
