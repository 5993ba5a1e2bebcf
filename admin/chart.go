package admin

import (
	"strconv"
	"strings"
	"time"

	"github.com/idemdev/idem/metrics"
)

// chart is a server-side SVG line chart of the collector's recent history.
type chart struct {
	Width, Height int
	Left, Right   int // plot area, x
	Top, Bottom   int // plot area, y
	Max           int64
	Span          string // "15m0s"
	Step          string // "5s"
	Series        []series
}

type series struct {
	Name   string
	Class  string
	Points string // SVG polyline points
	Sum    int64  // over the window
}

func newChart(samples []metrics.Sample, step time.Duration) *chart {
	c := &chart{Width: 720, Height: 180, Left: 40, Right: 710, Top: 10, Bottom: 160,
		Span: (step * time.Duration(len(samples))).String(), Step: step.String()}
	pick := []struct {
		name, class string
		v           func(metrics.Sample) int64
	}{
		{"duplicates prevented", "dup", func(s metrics.Sample) int64 { return s.DuplicatesPrevented }},
		{"mismatches", "mis", func(s metrics.Sample) int64 { return s.Mismatches }},
		{"reclaims", "rec", func(s metrics.Sample) int64 { return s.Reclaims }},
	}
	c.Max = 1
	for _, s := range samples {
		for _, p := range pick {
			c.Max = max(c.Max, p.v(s))
		}
	}
	for _, p := range pick {
		var b strings.Builder
		var sum int64
		for i, s := range samples {
			v := p.v(s)
			sum += v
			x := c.Left
			if len(samples) > 1 {
				x += i * (c.Right - c.Left) / (len(samples) - 1)
			}
			y := c.Bottom - int(v*int64(c.Bottom-c.Top)/c.Max)
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.Itoa(x) + "," + strconv.Itoa(y))
		}
		c.Series = append(c.Series, series{Name: p.name, Class: p.class, Points: b.String(), Sum: sum})
	}
	return c
}
