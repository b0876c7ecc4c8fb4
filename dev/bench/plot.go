package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// point is one measurement on a log-log panel.
type point struct {
	X, Y float64
	// Extrapolated points are drawn hollow, joined by a dashed line.
	Extrapolated bool
}

// series is one design's line on a panel.
type series struct {
	Label string
	Color color.RGBA
	Pts   []point
}

// panel is one log-log chart.
type panel struct {
	Title  string
	XLabel string
	YLabel string
	Series []series
	// RefY, when positive, draws a dashed horizontal line labelled RefLabel.
	RefY     float64
	RefLabel string
}

var (
	white     = color.RGBA{255, 255, 255, 255}
	black     = color.RGBA{0, 0, 0, 255}
	grid      = color.RGBA{225, 225, 225, 255}
	gridMinor = color.RGBA{242, 242, 242, 255}
	grey      = color.RGBA{110, 110, 110, 255}
	palette   = []color.RGBA{
		{200, 40, 40, 255},  // baseline: red
		{30, 90, 200, 255},  // opstatus ×1: blue
		{20, 150, 70, 255},  // opstatus ×4: green
		{150, 80, 190, 255}, // more instance counts
		{230, 140, 20, 255},
	}
)

// canvas is an RGBA image with the drawing primitives the plot needs.
type canvas struct{ *image.RGBA }

func newCanvas(w, h int) canvas {
	c := canvas{image.NewRGBA(image.Rect(0, 0, w, h))}
	c.fill(c.Bounds(), white)
	return c
}

func (c canvas) fill(r image.Rectangle, col color.RGBA) {
	r = r.Intersect(c.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c.SetRGBA(x, y, col)
		}
	}
}

// dot paints a width×width square centred on (x, y).
func (c canvas) dot(x, y, width int, col color.RGBA) {
	lo := -(width - 1) / 2
	c.fill(image.Rect(x+lo, y+lo, x+lo+width, y+lo+width), col)
}

// line draws from (x0, y0) to (x1, y1); dash > 0 draws dash pixels on, dash off.
func (c canvas) line(x0, y0, x1, y1, width, dash int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for i := 0; ; i++ {
		if dash <= 0 || (i/dash)%2 == 0 {
			c.dot(x0, y0, width, col)
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

// marker draws a circle of radius r, filled or hollow.
func (c canvas) marker(cx, cy, r int, filled bool, col color.RGBA) {
	for y := -r; y <= r; y++ {
		for x := -r; x <= r; x++ {
			d := math.Hypot(float64(x), float64(y))
			if d <= float64(r)+0.3 && (filled || d >= float64(r)-1.7) {
				c.SetRGBA(cx+x, cy+y, col)
			} else if !filled && d < float64(r)-1.7 {
				c.SetRGBA(cx+x, cy+y, white)
			}
		}
	}
}

// text draws s with its top-left corner at (x, y), each font pixel
// scale×scale.
func (c canvas) text(x, y int, s string, scale int, col color.RGBA) {
	for _, r := range s {
		g := glyphFor(r)
		for row, bits := range g {
			for colIdx, b := range bits {
				if b == '#' {
					c.fill(image.Rect(x+colIdx*scale, y+row*scale, x+(colIdx+1)*scale, y+(row+1)*scale), col)
				}
			}
		}
		x += glyphW * scale
	}
}

// vtext draws s bottom to top with its bottom-left corner at (x, y).
func (c canvas) vtext(x, y int, s string, scale int, col color.RGBA) {
	for _, r := range s {
		g := glyphFor(r)
		for row, bits := range g {
			for colIdx, b := range bits {
				if b == '#' {
					// Rotate 90° counter-clockwise: column → -y, row → x.
					c.fill(image.Rect(x+row*scale, y-(colIdx+1)*scale, x+(row+1)*scale, y-colIdx*scale), col)
				}
			}
		}
		y -= glyphW * scale
	}
}

func textWidth(s string, scale int) int { return len([]rune(s))*glyphW*scale - scale }

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

// decades returns the powers of ten that bracket [lo, hi].
func decades(lo, hi float64) (float64, float64) {
	return math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
}

func tickLabel(v float64) string {
	if v >= 1 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// draw renders p into r.
func (c canvas) drawPanel(r image.Rectangle, p panel) {
	const scale = 2
	c.text(r.Min.X+(r.Dx()-textWidth(p.Title, scale))/2, r.Min.Y, p.Title, scale, black)
	plot := image.Rect(r.Min.X+90, r.Min.Y+40, r.Max.X-20, r.Max.Y-70)

	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range p.Series {
		for _, pt := range s.Pts {
			if pt.X > 0 && pt.Y > 0 {
				xmin, xmax = math.Min(xmin, pt.X), math.Max(xmax, pt.X)
				ymin, ymax = math.Min(ymin, pt.Y), math.Max(ymax, pt.Y)
			}
		}
	}
	if p.RefY > 0 {
		ymin, ymax = math.Min(ymin, p.RefY), math.Max(ymax, p.RefY)
	}
	if math.IsInf(xmin, 1) {
		c.text(plot.Min.X+20, plot.Min.Y+20, "NO DATA", scale, grey)
		return
	}
	// x: a factor of two of room on each side; y: whole decades.
	xlo, xhi := xmin/2, xmax*2
	ylo, yhi := decades(ymin/1.2, ymax*1.2)
	px := func(v float64) int {
		f := (math.Log10(v) - math.Log10(xlo)) / (math.Log10(xhi) - math.Log10(xlo))
		return plot.Min.X + int(math.Round(f*float64(plot.Dx()-1)))
	}
	py := func(v float64) int {
		f := (math.Log10(v) - math.Log10(ylo)) / (math.Log10(yhi) - math.Log10(ylo))
		return plot.Max.Y - 1 - int(math.Round(f*float64(plot.Dy()-1)))
	}

	// Grid: decades, with lighter lines at 2..9 times each decade.
	for d := ylo; d <= yhi*1.0001; d *= 10 {
		for m := 2.0; m < 10 && d*m < yhi; m++ {
			c.line(plot.Min.X, py(d*m), plot.Max.X-1, py(d*m), 1, 0, gridMinor)
		}
		y := py(d)
		c.line(plot.Min.X, y, plot.Max.X-1, y, 1, 0, grid)
		l := tickLabel(d)
		c.text(plot.Min.X-10-textWidth(l, scale), y-glyphH*scale/2, l, scale, black)
	}
	x0, _ := decades(xlo, xhi)
	for d := x0; d <= xhi; d *= 10 {
		for m := 2.0; m < 10; m++ {
			if v := d * m; v > xlo && v < xhi {
				c.line(px(v), plot.Min.Y, px(v), plot.Max.Y-1, 1, 0, gridMinor)
			}
		}
		if d < xlo {
			continue
		}
		x := px(d)
		c.line(x, plot.Min.Y, x, plot.Max.Y-1, 1, 0, grid)
		l := tickLabel(d)
		c.text(x-textWidth(l, scale)/2, plot.Max.Y+10, l, scale, black)
	}
	// Axes.
	c.line(plot.Min.X, plot.Min.Y, plot.Min.X, plot.Max.Y-1, 2, 0, black)
	c.line(plot.Min.X, plot.Max.Y-1, plot.Max.X-1, plot.Max.Y-1, 2, 0, black)
	c.text(plot.Min.X+(plot.Dx()-textWidth(p.XLabel, scale))/2, plot.Max.Y+36, p.XLabel, scale, black)
	c.vtext(r.Min.X+4, plot.Min.Y+(plot.Dy()+textWidth(p.YLabel, scale))/2, p.YLabel, scale, black)

	if p.RefY > 0 {
		y := py(p.RefY)
		c.line(plot.Min.X, y, plot.Max.X-1, y, 2, 8, grey)
		c.text(plot.Max.X-10-textWidth(p.RefLabel, scale), y+8, p.RefLabel, scale, grey)
	}
	for _, s := range p.Series {
		for i := 1; i < len(s.Pts); i++ {
			a, b := s.Pts[i-1], s.Pts[i]
			dash := 0
			if a.Extrapolated || b.Extrapolated {
				dash = 8
			}
			c.line(px(a.X), py(a.Y), px(b.X), py(b.Y), 3, dash, s.Color)
		}
		for _, pt := range s.Pts {
			c.marker(px(pt.X), py(pt.Y), 7, !pt.Extrapolated, s.Color)
		}
	}
}

// plotData builds the three panels from the results: the pass, the
// freshness and the scan against N.
func plotData(r *results) (pass, fresh, scan panel) {
	pass = panel{Title: "FULL PASS TIME", XLabel: "PENDING OPERATIONS N", YLabel: "PASS TIME (S)",
		RefY: scanInterval.Seconds(), RefLabel: "ONE SCAN INTERVAL"}
	fresh = panel{Title: "FRESHNESS P99 AFTER THE FLIP", XLabel: "PENDING OPERATIONS N", YLabel: "P99 DELAY (S)",
		RefY: targetFreshness10k.Seconds(), RefLabel: "TARGET AT N = 10000"}
	scan = panel{Title: "SCAN, QUEUE WRITES INCLUDED", XLabel: "PENDING OPERATIONS N", YLabel: "SCAN (S)",
		RefY: scanInterval.Seconds(), RefLabel: "ONE SCAN INTERVAL"}
	ns, instances := r.dims()
	sb := series{Label: "BASELINE (SERIAL LOOP)", Color: palette[0]}
	fb := sb
	for _, n := range ns {
		if b, ok := r.base(n); ok {
			sb.Pts = append(sb.Pts, point{X: float64(n), Y: b.Pass.Seconds(), Extrapolated: b.Extrapolated})
			fb.Pts = append(fb.Pts, point{X: float64(n), Y: b.Freshness.P99.Seconds(), Extrapolated: b.Extrapolated})
		}
	}
	pass.Series, fresh.Series = append(pass.Series, sb), append(fresh.Series, fb)
	for i, k := range instances {
		s := series{Label: fmt.Sprintf("OPSTATUS ×%d", k), Color: palette[min(i+1, len(palette)-1)]}
		f, sc := s, s
		for _, n := range ns {
			h, ok := r.host(n, k)
			if !ok {
				continue
			}
			s.Pts = append(s.Pts, point{X: float64(n), Y: h.Pass.Seconds(), Extrapolated: h.PassAtLeast})
			if h.Flipped {
				f.Pts = append(f.Pts, point{X: float64(n), Y: h.Freshness.P99.Seconds(), Extrapolated: h.Freshness.P99AtLeast})
			}
			if len(h.Scans) > 0 {
				sc.Pts = append(sc.Pts, point{X: float64(n), Y: h.scanHost().Seconds()})
			}
		}
		pass.Series, fresh.Series, scan.Series = append(pass.Series, s), append(fresh.Series, f), append(scan.Series, sc)
	}
	return pass, fresh, scan
}

// renderPlot draws the three panels side by side with a legend.
func renderPlot(r *results) *image.RGBA {
	const w, h, scale = 1800, 700, 2
	c := newCanvas(w, h)
	pass, fresh, scan := plotData(r)
	third := w / 3
	for i, p := range []panel{pass, fresh, scan} {
		c.drawPanel(image.Rect(i*third+10, 20, (i+1)*third-10, h-110), p)
	}

	// Legend, wrapped onto as many rows as it needs.
	x, y := 100, h-90
	item := func(width int, draw func(x int)) {
		if x+width > w-20 {
			x, y = 100, y+30
		}
		draw(x)
		x += width + 40
	}
	for _, s := range pass.Series {
		item(52+textWidth(s.Label, scale), func(x int) {
			c.line(x, y+7, x+40, y+7, 3, 0, s.Color)
			c.marker(x+20, y+7, 7, true, s.Color)
			c.text(x+52, y, s.Label, scale, black)
		})
	}
	const hollow = "HOLLOW MARKER, DASHED LINE: EXTRAPOLATED (BASELINE) OR LOWER BOUND"
	item(24+textWidth(hollow, scale), func(x int) {
		c.marker(x+8, y+7, 7, false, grey)
		c.text(x+24, y, hollow, scale, black)
	})
	note := fmt.Sprintf("CLUSTER SERVICE %s · STORAGE %s PER QUEUE REQUEST · %d CPUS · %s",
		fmtLatency(r.Latency), fmtLatency(r.StorageLatency), r.Machine.CPUs, r.Started.UTC().Format("2006-01-02"))
	c.text(w-20-textWidth(note, scale), h-24, note, scale, grey)
	return c.RGBA
}

func fmtLatency(d time.Duration) string {
	return fmt.Sprintf("%d MS", d.Milliseconds())
}

// writePlot renders the plot to a PNG file.
func writePlot(path string, r *results) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, renderPlot(r)); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
