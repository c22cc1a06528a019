package bench

// `sandfs bench plot REPORT DIR`: PNG plots of one report's tables (the
// figures of that one run), drawn with image/png: line charts with the
// axes' tick values in a small built-in digit font; what the axes and
// colours mean is said beside the plot in docs/bench/snapshots.md.

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// plotSpec names a report table and the columns a plot takes from it:
// x from the first column, one series per y column.
type plotSpec struct {
	file  string
	title string   // the table's heading begins with this
	ys    []string // column heads, one series each
}

var plotSpecs = []plotSpec{
	{"snapshots-dirty.png", "Snapshot vs dirty size", []string{"snapshot: pause + write + resume", "dd of the same MiB, conv=fsync"}},
	{"snapshots-create.png", "Create from snapshot vs memory size", []string{"create: copy layer + restore + agent answers (median)", "restore to vCPUs running (median)"}},
}

// seriesColors: the first series blue, the second orange, the third green.
var seriesColors = []color.RGBA{{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}}

// plotMain is `sandfs bench plot REPORT DIR`.
func plotMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sandfs bench plot REPORT.md DIR")
		return codeUsage
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench plot:", err)
		return codeError
	}
	tables := parseTables(string(b))
	for _, sp := range plotSpecs {
		series, err := sp.series(tables)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench plot:", err)
			return codeError
		}
		if err := writePNG(filepath.Join(args[1], sp.file), lineChart(series)); err != nil {
			fmt.Fprintln(os.Stderr, "bench plot:", err)
			return codeError
		}
	}
	return 0
}

// parseTables reads the markdown tables of a report: heading, then rows
// of cells (the header row first; the |---| row left out). Only the
// first run's: it stops at the second "## " heading (earlier runs kept
// below in the same file).
func parseTables(s string) map[string][][]string {
	out := map[string][][]string{}
	title, runs := "", 0
	for _, line := range strings.Split(s, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			if runs++; runs > 1 {
				return out
			}
		case strings.HasPrefix(line, "### "):
			title = strings.TrimPrefix(line, "### ")
		case strings.HasPrefix(line, "|") && title != "" && !strings.HasPrefix(line, "|---"):
			cells := strings.Split(strings.Trim(line, "|"), " | ")
			for i := range cells {
				cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "*")
			}
			out[title] = append(out[title], cells)
		}
	}
	return out
}

type point struct{ x, y float64 }

// series finds sp's table and returns one series per y column.
func (sp plotSpec) series(tables map[string][][]string) ([][]point, error) {
	for title, rows := range tables {
		if !strings.HasPrefix(title, sp.title) || len(rows) < 2 {
			continue
		}
		out := make([][]point, len(sp.ys))
		for i, y := range sp.ys {
			col := -1
			for j, h := range rows[0] {
				if h == y {
					col = j
				}
			}
			if col < 0 {
				return nil, fmt.Errorf("table %q has no column %q", title, y)
			}
			for _, r := range rows[1:] {
				if col >= len(r) {
					continue
				}
				x, ok1 := leadingNumber(r[0])
				v, ok2 := leadingNumber(r[col])
				if ok1 && ok2 {
					out[i] = append(out[i], point{x, v})
				}
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no table %q in the report", sp.title)
}

// leadingNumber parses the number a cell begins with ("707.7 ms").
func leadingNumber(c string) (float64, bool) {
	f := strings.Fields(c)
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil && !math.IsNaN(v) && !math.IsInf(v, 0)
}

func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
