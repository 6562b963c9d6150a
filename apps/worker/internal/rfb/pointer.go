package rfb

import (
	"image"
	"image/color"
)

// arrow is the pointer DrawPointer draws (and Serve sends as a cursor
// shape): an arrow 12 pixels
// wide and 19 high, its tip at the pointer ('#' outline, '.' fill).
var arrow = []string{
	"#",
	"##",
	"#.#",
	"#..#",
	"#...#",
	"#....#",
	"#.....#",
	"#......#",
	"#.......#",
	"#........#",
	"#.........#",
	"#..........#",
	"#......#####",
	"#...#..#",
	"#..##..#",
	"#.#  #..#",
	"##   #..#",
	"      #..#",
	"      ###",
}

// DrawPointer draws the pointer, an arrow, into img with its tip at p (clipped).
func DrawPointer(img *image.RGBA, p image.Point) {
	b := img.Bounds()
	for dy, row := range arrow {
		for dx, ch := range row {
			q := image.Pt(p.X+dx, p.Y+dy)
			if !q.In(b) {
				continue
			}
			switch ch {
			case '#':
				img.SetRGBA(q.X, q.Y, color.RGBA{0, 0, 0, 255})
			case '.':
				img.SetRGBA(q.X, q.Y, color.RGBA{255, 255, 255, 255})
			}
		}
	}
}

// arrowSize is the arrow's width and height.
func arrowSize() (w, h int) {
	for _, row := range arrow {
		w = max(w, len(row))
	}
	return w, len(arrow)
}
