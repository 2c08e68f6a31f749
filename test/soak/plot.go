package main

import (
	"fmt"
	"image/color"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// replicaSlots name the replicas at a sample by age: the chart runs two,
// replaced by upgrades and failovers, so a line is a slot, not a pod (a
// drop is a new pod).
var replicaSlots = []string{"older replica", "newer replica"}

// series is one line of a panel.
type series struct {
	name string
	y    func(minute) (float64, bool)
}

// writePlot draws the minutes as four panels, one above the other, into a
// PNG: RSS and heap per replica, goroutines per replica, settled samples
// within quota, and pods created, placed and undecided (frozen moments
// shaded in every panel).
func writePlot(file string, rows []minute, frozen []window) error {
	slot := func(i int, v func(replicaStat) float64) func(minute) (float64, bool) {
		return func(m minute) (float64, bool) {
			if i >= len(m.Replicas) || m.Replicas[i].Frozen || m.Replicas[i].Error != "" {
				return 0, false
			}
			return v(m.Replicas[i]), true
		}
	}
	var memory, goroutines []series
	for i, name := range replicaSlots {
		memory = append(memory,
			series{name + " RSS", slot(i, func(r replicaStat) float64 { return r.RSSMiB })},
			series{name + " heap in use", slot(i, func(r replicaStat) float64 { return r.HeapMiB })})
		goroutines = append(goroutines, series{name, slot(i, func(r replicaStat) float64 { return r.Goroutines })})
	}
	always := func(v func(minute) float64) func(minute) (float64, bool) {
		return func(m minute) (float64, bool) { return v(m), true }
	}
	panels := []struct {
		title, unit string
		lines       []series
	}{
		{"apportion memory", "MiB", memory},
		{"apportion goroutines", "goroutines", goroutines},
		{"settled workloads within quota (by node labels)", "%", []series{
			{"within quota", func(m minute) (float64, bool) { return m.withinPercent(), m.Settled > 0 }},
		}},
		{"pods per minute", "pods", []series{
			{"created", always(func(m minute) float64 { return float64(m.Seen) })},
			{"placed", always(func(m minute) float64 { return float64(m.Decided) })},
			{"undecided", always(func(m minute) float64 { return float64(m.Undecided) })},
			{"undecided, replica frozen", always(func(m minute) float64 { return float64(m.UndecidedFrozen) })},
		}},
	}
	plots := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "minutes"
		p.Y.Label.Text = pn.unit
		p.Legend.Top = true
		p.Legend.Left = true
		for j, s := range pn.lines {
			var xys plotter.XYs
			for _, m := range rows {
				if y, ok := s.y(m); ok {
					xys = append(xys, plotter.XY{X: m.Elapsed, Y: y})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return fmt.Errorf("plotting %s: %w", s.name, err)
			}
			l.Color = plotutil.Color(j)
			l.Width = vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(s.name, l)
		}
		shadeFrozen(p, rows, frozen)
		plots[i] = []*plot.Plot{p}
	}
	img := vgimg.New(vg.Points(720), vg.Points(900))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadX: vg.Points(4), PadY: vg.Points(8),
		PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return f.Close()
}

// shadeFrozen marks the frozen moments with a light band along the x axis.
func shadeFrozen(p *plot.Plot, rows []minute, frozen []window) {
	if len(rows) == 0 || len(frozen) == 0 {
		return
	}
	start := rows[0].At.Add(-time.Duration(rows[0].Elapsed * float64(time.Minute)))
	for _, w := range frozen {
		to := w.To
		if to.IsZero() {
			to = rows[len(rows)-1].At
		}
		x0, x1 := w.From.Sub(start).Minutes(), to.Sub(start).Minutes()
		band, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: p.Y.Min}, {X: x1, Y: p.Y.Min}, {X: x1, Y: p.Y.Max}, {X: x0, Y: p.Y.Max}})
		if err != nil {
			continue
		}
		band.Color = color.NRGBA{R: 120, G: 160, B: 255, A: 50}
		band.LineStyle.Width = 0
		p.Add(band)
	}
}
