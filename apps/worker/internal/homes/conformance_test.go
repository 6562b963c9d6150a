package homes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// harness makes one Store implementation testable by the shared suite.
type harness struct {
	// open returns a fresh, empty store.
	open func(t *testing.T) Store
	// corrupt flips bytes of key's stored tar behind the store's back,
	// keeping its recorded revision; truncate cuts it short.
	corrupt, truncate func(t *testing.T, s Store, key string)
}

func payload(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sum(b []byte) string { return fmt.Sprintf("%x", sha256.Sum256(b)) }

func readAll(t *testing.T, s Store, key string) ([]byte, Revision) {
	t.Helper()
	rc, rev, err := s.Open(t.Context(), key)
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b, rev
}

// failingReader yields n bytes of src and then fails, as a botd export cut
// off by a kill would.
type failingReader struct {
	src []byte
	n   int
	off int
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.off >= f.n {
		return 0, errors.New("export stream cut off")
	}
	k := copy(p, f.src[f.off:min(f.n, len(f.src))])
	f.off += k
	return k, nil
}

// runConformance is the one suite both stores pass.
func runConformance(t *testing.T, h harness) {
	t.Run("RoundTripAndRevisions", func(t *testing.T) {
		s := h.open(t)
		ctx := t.Context()
		_, ok, err := s.Latest(ctx, "c1")
		require.NoError(t, err)
		require.False(t, ok, "a new store has no checkpoint")
		_, _, err = s.Open(ctx, "c1")
		require.ErrorIs(t, err, ErrNotFound)

		a := payload(1, 300<<10)
		ra, err := s.Put(ctx, "c1", bytes.NewReader(a))
		require.NoError(t, err)
		require.Equal(t, int64(1), ra.Number)
		require.Equal(t, int64(len(a)), ra.Size)
		require.Equal(t, sum(a), ra.SHA256)
		require.False(t, ra.At.IsZero())
		got, rev := readAll(t, s, "c1")
		require.Equal(t, sum(a), sum(got))
		require.Equal(t, ra.Number, rev.Number)

		b := payload(2, 12<<20) // more than one S3 part
		rb, err := s.Put(ctx, "c1", bytes.NewReader(b))
		require.NoError(t, err)
		require.Equal(t, int64(2), rb.Number, "latest-only, but revisions count")
		latest, ok, err := s.Latest(ctx, "c1")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, rb.SHA256, latest.SHA256)
		require.Equal(t, rb.Size, latest.Size)
		require.True(t, rb.At.Equal(latest.At))
		got, _ = readAll(t, s, "c1")
		require.Equal(t, sum(b), sum(got))

		// Keys are independent.
		_, ok, err = s.Latest(ctx, "c2")
		require.NoError(t, err)
		require.False(t, ok)
	})

	t.Run("BadKeys", func(t *testing.T) {
		s := h.open(t)
		ctx := t.Context()
		for _, k := range []string{"", ".", "..", "../etc", "a/b", `a\b`, ".hidden", "-x", "a\x00b", "a b", "é", strings.Repeat("k", 129)} {
			_, err := s.Put(ctx, k, strings.NewReader("x"))
			require.ErrorIs(t, err, ErrBadKey, "Put %q", k)
			_, _, err = s.Latest(ctx, k)
			require.ErrorIs(t, err, ErrBadKey, "Latest %q", k)
			_, _, err = s.Open(ctx, k)
			require.ErrorIs(t, err, ErrBadKey, "Open %q", k)
			require.ErrorIs(t, s.Delete(ctx, k), ErrBadKey, "Delete %q", k)
		}
	})

	t.Run("InterruptedPutKeepsPrevious", func(t *testing.T) {
		s := h.open(t)
		ctx := t.Context()
		a := payload(3, 1<<20)
		ra, err := s.Put(ctx, "k", bytes.NewReader(a))
		require.NoError(t, err)

		b := payload(4, 9<<20)
		_, err = s.Put(ctx, "k", &failingReader{src: b, n: 7 << 20})
		require.ErrorContains(t, err, "export stream cut off")

		// A cancelled context midway is a kill too.
		cctx, cancel := context.WithCancel(ctx)
		_, err = s.Put(cctx, "k", io.MultiReader(bytes.NewReader(b[:6<<20]), readerFunc(func([]byte) (int, error) {
			cancel()
			return 0, nil
		}), bytes.NewReader(b[6<<20:])))
		require.ErrorIs(t, err, context.Canceled)

		_, err = s.Put(ctx, "k", strings.NewReader(""))
		require.ErrorIs(t, err, ErrEmpty)

		latest, ok, err := s.Latest(ctx, "k")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, ra.SHA256, latest.SHA256)
		require.Equal(t, ra.Number, latest.Number)
		got, _ := readAll(t, s, "k")
		require.Equal(t, sum(a), sum(got), "the previous checkpoint still restores")
	})

	for _, c := range []struct {
		name   string
		damage func(t *testing.T, s Store, key string)
	}{{"CorruptRefused", h.corrupt}, {"TruncatedRefused", h.truncate}} {
		t.Run(c.name, func(t *testing.T) {
			s := h.open(t)
			ctx := t.Context()
			a := payload(5, 2<<20)
			ra, err := s.Put(ctx, "k", bytes.NewReader(a))
			require.NoError(t, err)
			c.damage(t, s, "k")
			rc, _, err := s.Open(ctx, "k")
			require.ErrorIs(t, err, ErrCorrupt)
			require.Nil(t, rc)
			require.Contains(t, err.Error(), "home k revision 1")
			// Refusing does not remove what is stored or its record.
			latest, ok, err := s.Latest(ctx, "k")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, ra.SHA256, latest.SHA256)
			// A new checkpoint replaces the damaged one.
			b := payload(6, 1<<20)
			rb, err := s.Put(ctx, "k", bytes.NewReader(b))
			require.NoError(t, err)
			require.Equal(t, int64(2), rb.Number)
			got, _ := readAll(t, s, "k")
			require.Equal(t, sum(b), sum(got))
		})
	}

	t.Run("PutsOfOneKeySerialized", func(t *testing.T) {
		s := h.open(t)
		ctx := t.Context()
		const n = 5
		var active, maxActive atomic.Int32
		var wg sync.WaitGroup
		revs := make([]Revision, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				revs[i], errs[i] = s.Put(ctx, "same", &trackingReader{r: bytes.NewReader(payload(uint64(10+i), 3<<20)), active: &active, max: &maxActive})
			}()
		}
		wg.Wait()
		seen := map[int64]bool{}
		for i := range n {
			require.NoError(t, errs[i])
			seen[revs[i].Number] = true
		}
		require.Equal(t, int32(1), maxActive.Load(), "two checkpoints of one key streamed at once")
		require.Len(t, seen, n, "every checkpoint got its own revision number")
		latest, _, err := s.Latest(ctx, "same")
		require.NoError(t, err)
		require.Equal(t, int64(n), latest.Number)
		got, rev := readAll(t, s, "same")
		require.Equal(t, latest.SHA256, sum(got))
		require.Equal(t, latest.Number, rev.Number)
	})

	t.Run("Delete", func(t *testing.T) {
		s := h.open(t)
		ctx := t.Context()
		_, err := s.Put(ctx, "gone", strings.NewReader("tar bytes"))
		require.NoError(t, err)
		require.NoError(t, s.Delete(ctx, "gone"))
		_, ok, err := s.Latest(ctx, "gone")
		require.NoError(t, err)
		require.False(t, ok)
		_, _, err = s.Open(ctx, "gone")
		require.ErrorIs(t, err, ErrNotFound)
		require.NoError(t, s.Delete(ctx, "gone"), "deleting a missing key is fine")
		r, err := s.Put(ctx, "gone", strings.NewReader("again"))
		require.NoError(t, err)
		require.Equal(t, int64(1), r.Number)
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// trackingReader records how many Puts are reading at once.
type trackingReader struct {
	r           io.Reader
	active, max *atomic.Int32
	started     bool
	done        bool
}

func (tr *trackingReader) Read(p []byte) (int, error) {
	if !tr.started {
		tr.started = true
		a := tr.active.Add(1)
		for {
			m := tr.max.Load()
			if a <= m || tr.max.CompareAndSwap(m, a) {
				break
			}
		}
	}
	if len(p) > 64<<10 {
		p = p[:64<<10] // small reads: many chances to overlap
	}
	n, err := tr.r.Read(p)
	if err == io.EOF && !tr.done {
		tr.done = true
		tr.active.Add(-1)
	}
	return n, err
}
