package screen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// fragWriter is ffmpeg's stdout: a fragmented MP4 as a stream of top-level
// boxes (ftyp, moov, then moof+mdat pairs). It writes only whole boxes,
// and a moof only together with its mdat, so the file always ends on a
// whole fragment and plays to its end: at the size cap it stops before the
// fragment that would cross it (the file never exceeds the cap), and on a
// write error (ENOSPC) it cuts the file back to its last whole fragment.
// Either way it calls end once and drops the rest of the stream.
type fragWriter struct {
	f     *os.File
	limit int64
	end   func(reason string, err error)

	mu   sync.Mutex
	n    int64  // bytes in the file
	buf  []byte // bytes not yet a whole box
	moof []byte // a fragment's moof waiting for its mdat
	done bool
	// frame is closed once the file holds its first fragment (a moof and
	// its mdat: video that plays), when the writer was made with one.
	frame     chan struct{}
	hasFrames bool
}

// maxBox bounds one box held in memory (a fragment is about a second of
// video).
const maxBox = 64 << 20

func (w *fragWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for !w.done && len(w.buf) >= 8 {
		size, hdr := int64(binary.BigEndian.Uint32(w.buf)), int64(8)
		if size == 1 {
			if len(w.buf) < 16 {
				break
			}
			size, hdr = int64(binary.BigEndian.Uint64(w.buf[8:])), 16
		}
		if size < hdr || size > maxBox {
			w.finish("failed", fmt.Errorf("the encoder wrote a box of %d bytes", size))
			break
		}
		if int64(len(w.buf)) < size {
			break
		}
		box := w.buf[:size]
		if string(box[4:8]) == "moof" {
			w.moof = append(w.moof[:0], box...)
		} else {
			w.commit(append(w.moof, box...))
			if w.done {
				break
			}
			w.moof = w.moof[:0]
		}
		w.buf = append(w.buf[:0], w.buf[size:]...)
	}
	return len(p), nil
}

// commit appends one unit (a box, or a moof and its mdat) when it fits.
func (w *fragWriter) commit(unit []byte) {
	if w.n+int64(len(unit)) > w.limit {
		w.finish("max_bytes", nil)
		return
	}
	n, err := w.f.Write(unit)
	if err == nil && !w.hasFrames && len(unit) >= 8 && string(unit[4:8]) == "moof" {
		w.hasFrames = true
		if w.frame != nil {
			close(w.frame)
		}
	}
	if err != nil {
		_ = w.f.Truncate(w.n)
		_, _ = w.f.Seek(w.n, 0)
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			w.finish("disk_full", err)
		} else {
			w.finish("failed", err)
		}
		return
	}
	w.n += int64(n)
}

func (w *fragWriter) finish(reason string, err error) {
	w.done = true
	w.buf, w.moof = nil, nil
	go w.end(reason, err)
}

// size is the bytes in the file.
func (w *fragWriter) size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}
