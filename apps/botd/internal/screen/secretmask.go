package screen

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"

	"github.com/open-bot/computer/apps/botd/internal/desktop"
	"github.com/open-bot/computer/pkg/shared"
)

// SecretMasker is what an ElementSource may also be: it knows the screen
// boxes that show a secret typed by type-secret (issue 36), which every
// screenshot that leaves botd has painted over.
type SecretMasker interface {
	// SecretBoxes lists the boxes of screen id to paint over (none when
	// no secret shows). It fails closed: when it cannot tell where a
	// secret shows, it answers the whole screen.
	SecretBoxes(ctx context.Context, id string) ([]shared.Box, error)
}

// MaskColor is the colour a secret's box is painted in a screenshot.
var MaskColor = color.RGBA{R: 0x3c, G: 0x3c, B: 0x46, A: 0xff}

func (m *Manager) secretMasker() SecretMasker {
	m.elemMu.Lock()
	defer m.elemMu.Unlock()
	sm, _ := m.elements.(SecretMasker)
	return sm
}

// startMasks reads the boxes to paint over in the background (nil when
// nothing masks this computer's screens).
func (s *Screen) startMasks(ctx context.Context, sm SecretMasker) <-chan []shared.Box {
	if sm == nil {
		return nil
	}
	ch := make(chan []shared.Box, 1)
	go func() {
		mctx, cancel := context.WithTimeout(ctx, ElementsTimeout)
		defer cancel()
		boxes, err := sm.SecretBoxes(mctx, s.ID)
		if err != nil {
			boxes = []shared.Box{{X: 0, Y: 0, W: Width, H: Height}}
		}
		ch <- boxes
	}()
	return ch
}

// maskFrame paints boxes over the JPEG jpg (and returns it re-encoded).
func maskFrame(jpg []byte, boxes []shared.Box) ([]byte, error) {
	src, err := jpeg.Decode(bytes.NewReader(jpg))
	if err != nil {
		return nil, fmt.Errorf("mask a secret: decode the frame: %w", err)
	}
	img := image.NewRGBA(src.Bounds())
	draw.Draw(img, img.Bounds(), src, src.Bounds().Min, draw.Src)
	fill := image.NewUniform(MaskColor)
	for _, b := range boxes {
		r := image.Rect(b.X, b.Y, b.X+b.W, b.Y+b.H).Intersect(img.Bounds())
		draw.Draw(img, r, fill, image.Point{}, draw.Src)
	}
	var out bytes.Buffer
	if err := jpeg.Encode(&out, img, &jpeg.Options{Quality: desktop.JPEGQuality}); err != nil {
		return nil, fmt.Errorf("mask a secret: encode the frame: %w", err)
	}
	return out.Bytes(), nil
}
