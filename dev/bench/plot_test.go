package main

import (
	"image/color"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPlotData(t *testing.T) {
	pass, fresh, scan := plotData(sampleResults())
	require.Len(t, pass.Series, 3, "baseline, ×1 and ×4")
	require.Len(t, pass.Series[0].Pts, 3, "the baseline at every N")
	require.False(t, pass.Series[0].Pts[0].Extrapolated, "measured at N=1,000")
	require.True(t, pass.Series[0].Pts[1].Extrapolated, "extrapolated at N=10,000")
	require.InDelta(t, 600.0, pass.Series[0].Pts[1].Y, 1e-9, "linearly")
	require.Len(t, fresh.Series[1].Pts, 2, "no freshness without a flip")
	require.Len(t, scan.Series, 2, "opstatus only")
	require.InDelta(t, 2.0, scan.Series[0].Pts[1].Y, 1e-9, "the median scan at N=10,000")
	require.InDelta(t, 15.0, fresh.RefY, 1e-9)
}

func TestRenderPlot(t *testing.T) {
	img, err := renderPlot(sampleResults())
	require.NoError(t, err)
	require.Equal(t, imageW, img.Bounds().Dx())
	require.Equal(t, imageH, img.Bounds().Dy())
	seen := map[color.RGBA]int{}
	dark := 0
	for y := 0; y < img.Bounds().Dy(); y++ {
		for x := 0; x < img.Bounds().Dx(); x++ {
			c := img.RGBAAt(x, y)
			seen[c]++
			if c.R < 80 && c.G < 80 && c.B < 80 {
				dark++
			}
		}
	}
	for i := range 3 {
		require.Greater(t, seen[palette[i]], 500, "series %d is drawn", i)
	}
	require.Greater(t, dark, 1000, "labels and axes")

	path := t.TempDir() + "/plot.png"
	require.NoError(t, writePlot(path, sampleResults()))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "\x89PNG", string(b[:4]))
}

// TestRenderPlotWithoutData: a log scale has no room for zero, so a panel
// with nothing positive to show is drawn empty instead of failing.
func TestRenderPlotWithoutData(t *testing.T) {
	_, err := renderPlot(&results{})
	require.NoError(t, err)

	r := sampleResults()
	for i := range r.Opstatus {
		r.Opstatus[i].Pass = 0
	}
	_, err = renderPlot(r)
	require.NoError(t, err)
}
