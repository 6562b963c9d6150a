package desktop

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCaptureCutShort: a JPEG missing any part of its tail (down to the
// last byte) is errCutShort and a whole one is not; a capture that comes
// back cut short is taken again, and three in a row are an error, never
// a frame.
func TestCaptureCutShort(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 64, 48))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	img.Set(3, 3, color.RGBA{R: 255, A: 255})
	var buf bytes.Buffer
	require.NoError(t, jpeg.Encode(&buf, img, &jpeg.Options{Quality: 72}))
	whole := buf.Bytes()
	require.NoError(t, checkWhole(whole))
	require.NoError(t, checkWhole(append(bytes.Clone(whole), 0, 0, 0)), "NUL padding after the marker")
	for _, cut := range []int{1, 2, 100, len(whole) - 200} {
		short := whole[:len(whole)-cut]
		_, derr := jpeg.Decode(bytes.NewReader(short))
		require.Error(t, derr, "a JPEG without its last %d bytes does not decode", cut)
		require.ErrorIs(t, checkWhole(short), errCutShort, "cut by %d bytes", cut)
	}

	ctx := context.Background()
	answers := [][]byte{whole[:len(whole)-5], whole[:len(whole)-1], whole}
	calls, warned := 0, 0
	take := func() (frame, error) {
		b := answers[calls]
		calls++
		if err := checkWhole(b); err != nil {
			return frame{}, err
		}
		return frame{jpeg: b}, nil
	}
	f, err := retryCutShort(ctx, take, func(int, error) { warned++ })
	require.NoError(t, err)
	require.Equal(t, whole, f.jpeg)
	require.Equal(t, 3, calls)
	require.Equal(t, 2, warned)

	answers = [][]byte{whole[:10], whole[:20], whole[:30], whole}
	calls = 0
	_, err = retryCutShort(ctx, take, func(int, error) {})
	require.ErrorIs(t, err, errCutShort)
	require.Equal(t, 3, calls, "three tries, then the error")

	other := errors.New("the vendor said no")
	calls = 0
	_, err = retryCutShort(ctx, func() (frame, error) { calls++; return frame{}, other }, func(int, error) {})
	require.ErrorIs(t, err, other)
	require.Equal(t, 1, calls, "any other error is not taken again")
}
