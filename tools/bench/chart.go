package bench

import (
	"image"
	"image/color"
	"math"
	"strconv"
)

// Chart geometry, in pixels.
const (
	chartW, chartH = 640, 400
	marginL        = 70
	marginB        = 40
	marginT, marR  = 20, 20
	ticks          = 5
)

// digits is a 3x5 font for tick values: each glyph five rows of three
// bits, the high bit left.
var digits = map[rune][5]uint8{
	'0': {7, 5, 5, 5, 7}, '1': {2, 6, 2, 2, 7}, '2': {7, 1, 7, 4, 7}, '3': {7, 1, 7, 1, 7},
	'4': {5, 5, 7, 1, 1}, '5': {7, 4, 7, 1, 7}, '6': {7, 4, 7, 5, 7}, '7': {7, 1, 1, 1, 1},
	'8': {7, 5, 7, 5, 7}, '9': {7, 5, 7, 1, 7}, '.': {0, 0, 0, 0, 2},
}

// canvas is an RGBA image with a few drawing helpers.
type canvas struct{ *image.RGBA }

func (c canvas) dot(x, y, r int, col color.RGBA) {
	for dy := -r; dy <= r; dy++ {
		for dx := -r; dx <= r; dx++ {
			c.Set(x+dx, y+dy, col)
		}
	}
}

// line draws a line r pixels thick from (x0,y0) to (x1,y1).
func (c canvas) line(x0, y0, x1, y1, r int, col color.RGBA) {
	n := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= n; i++ {
		c.dot(x0+(x1-x0)*i/n, y0+(y1-y0)*i/n, r, col)
	}
}

// text draws s (digits and '.') at scale 2, its top left at (x,y).
func (c canvas) text(x, y int, s string, col color.RGBA) {
	for _, ch := range s {
		g := digits[ch]
		for row, bits := range g {
			for b := 0; b < 3; b++ {
				if bits&(4>>b) != 0 {
					for d := 0; d < 4; d++ {
						c.Set(x+2*b+d%2, y+2*row+d/2, col)
					}
				}
			}
		}
		x += 8
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// tickLabel formats a tick value: whole numbers plainly, others to one
// decimal.
func tickLabel(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// lineChart draws each series (a colour each, seriesColors) on linear
// axes from 0 (y) and the smallest x to the largest values, with five
// ticks on each axis.
func lineChart(series [][]point) image.Image {
	c := canvas{image.NewRGBA(image.Rect(0, 0, chartW, chartH))}
	black, grey := color.RGBA{0, 0, 0, 255}, color.RGBA{220, 220, 220, 255}
	for i := range c.Pix {
		c.Pix[i] = 255
	}
	x0, x1, y1 := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range series {
		for _, p := range s {
			x0, x1, y1 = math.Min(x0, p.x), math.Max(x1, p.x), math.Max(y1, p.y)
		}
	}
	if x1 <= x0 {
		x0, x1 = 0, math.Max(1, x1)
	}
	if y1 <= 0 {
		y1 = 1
	}
	y1 = niceCeil(y1 * 1.05)
	pw, ph := chartW-marginL-marR, chartH-marginT-marginB
	px := func(x float64) int { return marginL + int(math.Round((x-x0)/(x1-x0)*float64(pw))) }
	py := func(y float64) int { return marginT + ph - int(math.Round(y/y1*float64(ph))) }
	for i := 0; i <= ticks; i++ {
		yv, xv := y1*float64(i)/ticks, x0+(x1-x0)*float64(i)/ticks
		c.line(marginL, py(yv), marginL+pw, py(yv), 0, grey)
		c.text(4, py(yv)-5, tickLabel(math.Round(yv)), black)
		l := tickLabel(math.Round(xv*10) / 10)
		c.text(px(xv)-4*len(l), marginT+ph+10, l, black)
	}
	c.line(marginL, marginT, marginL, marginT+ph, 0, black)
	c.line(marginL, marginT+ph, marginL+pw, marginT+ph, 0, black)
	for i, s := range series {
		col := seriesColors[i%len(seriesColors)]
		for j, p := range s {
			c.dot(px(p.x), py(p.y), 3, col)
			if j > 0 {
				c.line(px(s[j-1].x), py(s[j-1].y), px(p.x), py(p.y), 1, col)
			}
		}
	}
	return c
}

// niceCeil rounds v (> 0) up to 1, 2 or 5 times a power of ten, so that
// the ticks (fifths) are round numbers.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
