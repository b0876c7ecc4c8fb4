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

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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
	grid    = color.RGBA{215, 215, 215, 255}
	grey    = color.RGBA{110, 110, 110, 255}
	palette = []color.RGBA{
		{200, 40, 40, 255},  // baseline: red
		{30, 90, 200, 255},  // opstatus ×1: blue
		{20, 150, 70, 255},  // opstatus ×4: green
		{150, 80, 190, 255}, // more instance counts
		{230, 140, 20, 255},
	}
)

// The image's size in pixels, and one pixel in vg's units.
const (
	imageW, imageH = 1800, 700
	dpi            = 96
	px             = vg.Inch / dpi
)

// Sizes in the plot, in pixels.
const (
	lineWidth    = 3 * px
	markerRadius = 7 * px
	dash         = 8 * px
)

// lineStyle is a series' line, dashed where it leads to or from an
// extrapolated point.
func lineStyle(col color.Color, dashed bool) draw.LineStyle {
	s := draw.LineStyle{Color: col, Width: lineWidth}
	if dashed {
		s.Dashes = []vg.Length{dash, dash}
	}
	return s
}

// markerStyle is a measured point's marker, or a hollow one for an
// extrapolated point or a lower bound.
func markerStyle(col color.Color, filled bool) draw.GlyphStyle {
	s := draw.GlyphStyle{Color: col, Radius: markerRadius, Shape: draw.CircleGlyph{}}
	if !filled {
		s.Shape = hollowGlyph{}
	}
	return s
}

// hollowGlyph is a ring filled white, so that a line through it stops at
// its edge.
type hollowGlyph struct{}

// DrawGlyph implements draw.GlyphDrawer.
func (hollowGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	r := sty.Radius - px
	var p vg.Path
	p.Move(vg.Point{X: pt.X + r, Y: pt.Y})
	p.Arc(pt, r, 0, 2*math.Pi)
	p.Close()
	c.SetColor(color.White)
	c.Fill(p)
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: 2 * px})
	c.Stroke(p)
}

// sans is the plot's typeface; gonum's default is the serif one.
var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// textStyle is the style of the labels drawn outside gonum's axes.
func textStyle(size vg.Length, col color.Color) text.Style {
	return text.Style{
		Color:   col,
		Font:    font.From(sans, size),
		Handler: plot.DefaultTextHandler,
		YAlign:  draw.YCenter,
	}
}

// bounds returns the range of the positive values of p's points and
// reference line (a log scale has no room for the others), and whether
// there is any.
func (p panel) bounds() (xmin, xmax, ymin, ymax float64, ok bool) {
	xmin, xmax, ymin, ymax = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range p.Series {
		for _, pt := range s.Pts {
			if pt.X > 0 && pt.Y > 0 {
				xmin, xmax = math.Min(xmin, pt.X), math.Max(xmax, pt.X)
				ymin, ymax = math.Min(ymin, pt.Y), math.Max(ymax, pt.Y)
			}
		}
	}
	if math.IsInf(xmin, 1) {
		return 0, 0, 0, 0, false
	}
	if p.RefY > 0 {
		ymin, ymax = math.Min(ymin, p.RefY), math.Max(ymax, p.RefY)
	}
	return xmin, xmax, ymin, ymax, true
}

// decades returns the powers of ten that bracket [lo, hi].
func decades(lo, hi float64) (float64, float64) {
	return math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
}

// logTicks marks every decade, labelled, and 2 to 9 times each. It stands
// in for plot.LogTicks, which truncates log10(min) towards zero and so
// leaves out the first decade of an axis that starts below 1.
func logTicks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		d := math.Pow10(int(e))
		ticks = append(ticks, plot.Tick{Value: d, Label: strconv.FormatFloat(d, 'f', -1, 64)})
		for m := 2.0; m < 10; m++ {
			ticks = append(ticks, plot.Tick{Value: d * m})
		}
	}
	return ticks
}

// plot makes p a log-log gonum plot: a grid at the decades, the reference
// line, and each series as markers joined by lines, hollow markers and
// dashed lines where a point is extrapolated.
func (p panel) plot() (*plot.Plot, error) {
	pl := plot.New()
	pl.X.Label.Text, pl.Y.Label.Text = p.XLabel, p.YLabel
	for _, ax := range []*plot.Axis{&pl.X, &pl.Y} {
		ax.Label.TextStyle.Font = font.From(sans, 15*px)
		ax.Tick.Label.Font = font.From(sans, 14*px)
	}
	xmin, xmax, ymin, ymax, ok := p.bounds()
	if !ok {
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: 0.5, Y: 0.5}}, Labels: []string{"no data"}})
		if err != nil {
			return nil, err
		}
		l.TextStyle[0] = textStyle(15*px, grey)
		l.TextStyle[0].XAlign = draw.XCenter
		pl.Add(l)
		pl.X.Min, pl.X.Max, pl.Y.Min, pl.Y.Max = 0, 1, 0, 1
		pl.X.Tick.Marker, pl.Y.Tick.Marker = plot.ConstantTicks{}, plot.ConstantTicks{}
		return pl, nil
	}
	// x: a factor of two of room on each side; y: whole decades.
	xlo, xhi := xmin/2, xmax*2
	ylo, yhi := decades(ymin/1.2, ymax*1.2)
	pl.X.Scale, pl.Y.Scale = plot.LogScale{}, plot.LogScale{}
	pl.X.Tick.Marker, pl.Y.Tick.Marker = plot.TickerFunc(logTicks), plot.TickerFunc(logTicks)
	g := plotter.NewGrid()
	g.Vertical, g.Horizontal = draw.LineStyle{Color: grid, Width: px}, draw.LineStyle{Color: grid, Width: px}
	pl.Add(g)

	if p.RefY > 0 {
		ref, err := plotter.NewLine(plotter.XYs{{X: xlo, Y: p.RefY}, {X: xhi, Y: p.RefY}})
		if err != nil {
			return nil, err
		}
		ref.LineStyle = lineStyle(grey, true)
		ref.LineStyle.Width = 2 * px
		label, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: xhi, Y: p.RefY}}, Labels: []string{p.RefLabel}})
		if err != nil {
			return nil, err
		}
		label.TextStyle[0] = textStyle(14*px, grey)
		label.TextStyle[0].XAlign, label.TextStyle[0].YAlign = draw.XRight, draw.YTop
		label.Offset = vg.Point{X: -10 * px, Y: -6 * px}
		pl.Add(ref, label)
	}
	for _, s := range p.Series {
		if err := addSeries(pl, s); err != nil {
			return nil, err
		}
	}
	pl.X.Min, pl.X.Max, pl.Y.Min, pl.Y.Max = xlo, xhi, ylo, yhi
	return pl, nil
}

// addSeries adds s's lines and markers to pl.
func addSeries(pl *plot.Plot, s series) error {
	var pts []point
	for _, pt := range s.Pts {
		if pt.X > 0 && pt.Y > 0 {
			pts = append(pts, pt)
		}
	}
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		l, err := plotter.NewLine(plotter.XYs{{X: a.X, Y: a.Y}, {X: b.X, Y: b.Y}})
		if err != nil {
			return err
		}
		l.LineStyle = lineStyle(s.Color, a.Extrapolated || b.Extrapolated)
		pl.Add(l)
	}
	for _, pt := range pts {
		m, err := plotter.NewScatter(plotter.XYs{{X: pt.X, Y: pt.Y}})
		if err != nil {
			return err
		}
		m.GlyphStyle = markerStyle(s.Color, !pt.Extrapolated)
		pl.Add(m)
	}
	return nil
}

// plotData builds the three panels from the results: the pass, the
// freshness and the scan against N.
func plotData(r *results) (pass, fresh, scan panel) {
	pass = panel{Title: "Full pass time", XLabel: "pending operations N", YLabel: "pass time (s)",
		RefY: scanInterval.Seconds(), RefLabel: "one scan interval"}
	fresh = panel{Title: "Freshness p99 after the flip", XLabel: "pending operations N", YLabel: "p99 delay (s)",
		RefY: targetFreshness10k.Seconds(), RefLabel: "target at N = 10,000"}
	scan = panel{Title: "Scan, queue writes included", XLabel: "pending operations N", YLabel: "scan (s)",
		RefY: scanInterval.Seconds(), RefLabel: "one scan interval"}
	ns, instances := r.dims()
	sb := series{Label: "baseline (serial loop)", Color: palette[0]}
	fb := sb
	for _, n := range ns {
		if b, ok := r.base(n); ok {
			sb.Pts = append(sb.Pts, point{X: float64(n), Y: b.Pass.Seconds(), Extrapolated: b.Extrapolated})
			fb.Pts = append(fb.Pts, point{X: float64(n), Y: b.Freshness.P99.Seconds(), Extrapolated: b.Extrapolated})
		}
	}
	pass.Series, fresh.Series = append(pass.Series, sb), append(fresh.Series, fb)
	for i, k := range instances {
		s := series{Label: r.design(k), Color: palette[min(i+1, len(palette)-1)]}
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

// legendHeight is the strip along the bottom of the image that holds the
// legend and the note on the run.
const legendHeight = 110 * px

// renderPlot draws the three panels side by side with a legend.
func renderPlot(r *results) (*image.RGBA, error) {
	pass, fresh, scan := plotData(r)
	panels := []panel{pass, fresh, scan}
	var plots []*plot.Plot
	for _, p := range panels {
		pl, err := p.plot()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Title, err)
		}
		plots = append(plots, pl)
	}
	img := vgimg.NewWith(vgimg.UseWH(imageW*px, imageH*px), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	top := draw.Crop(dc, 0, 0, legendHeight, 0)
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: 50 * px, PadTop: 45 * px, PadLeft: 10 * px, PadRight: 20 * px}
	// The titles are drawn here, at one height: gonum would put each below
	// the room it reserves for its plot's y label, which it overestimates on
	// a log scale by a different amount in each panel.
	title := textStyle(17*px, color.Black)
	title.XAlign, title.YAlign = draw.XCenter, draw.YTop
	for i, c := range plot.Align([][]*plot.Plot{plots}, tiles, top)[0] {
		plots[i].Draw(c)
		data := plots[i].DataCanvas(c)
		dc.FillText(title, vg.Point{X: (data.Min.X + data.Max.X) / 2, Y: top.Max.Y - 15*px}, panels[i].Title)
	}
	drawLegend(dc, pass.Series)
	note := fmt.Sprintf("Cluster Service %s · Storage %s per queue request · %d CPUs · %s",
		fmtLatency(r.Latency), fmtLatency(r.StorageLatency), r.Machine.CPUs, r.Started.UTC().Format("2006-01-02"))
	sty := textStyle(14*px, grey)
	sty.XAlign = draw.XRight
	dc.FillText(sty, vg.Point{X: dc.Max.X - 20*px, Y: dc.Min.Y + 18*px}, note)
	return img.Image().(*image.RGBA), nil
}

// drawLegend draws one entry per series and one for the hollow markers
// along the bottom of c, wrapped onto as many rows as it needs.
func drawLegend(c draw.Canvas, ss []series) {
	label := textStyle(15*px, color.Black)
	left := c.Min.X + 100*px
	x, y := left, c.Min.Y+80*px
	item := func(name string, thumb func(x vg.Length)) {
		width := 52*px + label.Width(name)
		if x+width > c.Max.X-20*px {
			x, y = left, y-30*px
		}
		thumb(x)
		c.FillText(label, vg.Point{X: x + 52*px, Y: y}, name)
		x += width + 40*px
	}
	for _, s := range ss {
		item(s.Label, func(x vg.Length) {
			c.StrokeLine2(lineStyle(s.Color, false), x, y, x+40*px, y)
			c.DrawGlyph(markerStyle(s.Color, true), vg.Point{X: x + 20*px, Y: y})
		})
	}
	item("hollow marker, dashed line: extrapolated (baseline) or lower bound", func(x vg.Length) {
		c.StrokeLine2(lineStyle(grey, true), x, y, x+40*px, y)
		c.DrawGlyph(markerStyle(grey, false), vg.Point{X: x + 20*px, Y: y})
	})
}

func fmtLatency(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// writePlot renders the plot to a PNG file.
func writePlot(path string, r *results) error {
	img, err := renderPlot(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
