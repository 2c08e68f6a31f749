// Package promtext reads the Prometheus text format (a /metrics page) well
// enough for the scale benchmark and the soak (test/benchscale, test/soak):
// counters, gauges and histograms by name and labels. The exposition parser
// lives in a module the product does not depend on, so a small reader does.
package promtext

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Sample is one line of the Prometheus text format: a metric name, its
// labels and its value.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape is one /metrics page, parsed.
type Scrape []Sample

// Parse reads the text format; comment lines and lines it cannot read
// are skipped.
func Parse(text string) Scrape {
	var out Scrape
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if s, ok := parseSample(line); ok {
			out = append(out, s)
		}
	}
	return out
}

func parseSample(line string) (Sample, bool) {
	s := Sample{Labels: map[string]string{}}
	var rest string
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return s, false
	} else if line[i] == '{' {
		end := strings.LastIndex(line, "}")
		if end < i {
			return s, false
		}
		s.Name, rest = line[:i], line[end+1:]
		parseLabels(line[i+1:end], s.Labels)
	} else {
		s.Name, rest = line[:i], line[i:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, false
	}
	s.Value = v
	return s, true
}

// parseLabels reads name="value" pairs; values may hold escaped quotes and
// commas.
func parseLabels(text string, into map[string]string) {
	for text != "" {
		eq := strings.Index(text, `="`)
		if eq < 0 {
			return
		}
		name := strings.TrimSpace(strings.TrimPrefix(text[:eq], ","))
		var val strings.Builder
		i := eq + 2
		for ; i < len(text) && text[i] != '"'; i++ {
			if text[i] == '\\' && i+1 < len(text) {
				i++
				if text[i] == 'n' {
					val.WriteByte('\n')
					continue
				}
			}
			val.WriteByte(text[i])
		}
		into[name] = val.String()
		if i >= len(text) {
			return
		}
		text = strings.TrimPrefix(text[i+1:], ",")
	}
}

// sum adds the values of name over the samples whose labels include match.
func (s Scrape) Sum(name string, match map[string]string) float64 {
	var total float64
	for _, x := range s {
		if x.Name == name && HasAll(x.Labels, match) {
			total += x.Value
		}
	}
	return total
}

// by adds the values of name per value of label.
func (s Scrape) By(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, x := range s {
		if x.Name == name {
			out[x.Labels[label]] += x.Value
		}
	}
	return out
}

// Histogram returns the cumulative buckets of name (summed over its other
// labels), ordered by bound.
func (s Scrape) Histogram(name string) Histogram {
	byBound := map[float64]float64{}
	for _, x := range s {
		if x.Name != name+"_bucket" {
			continue
		}
		le, err := strconv.ParseFloat(x.Labels["le"], 64)
		if err != nil {
			continue
		}
		byBound[le] += x.Value
	}
	h := make(Histogram, 0, len(byBound))
	for le, n := range byBound {
		h = append(h, Bucket{LE: le, Count: n})
	}
	sort.Slice(h, func(i, j int) bool { return h[i].LE < h[j].LE })
	return h
}

// HasAll reports whether have holds every label of want.
func HasAll(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// Bucket is one cumulative histogram bucket: Count observations <= LE.
type Bucket struct {
	LE    float64
	Count float64
}

// MarshalJSON writes the bound as Prometheus does, "+Inf" included, which
// JSON numbers cannot hold.
func (b Bucket) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"le":%q,"count":%g}`, strconv.FormatFloat(b.LE, 'g', -1, 64), b.Count), nil
}

// Histogram is cumulative buckets ordered by bound, the last one +Inf.
type Histogram []Bucket

// minus is h less an earlier reading of the same Histogram: what was
// observed in between.
func (h Histogram) Minus(before Histogram) Histogram {
	prev := map[float64]float64{}
	for _, b := range before {
		prev[b.LE] = b.Count
	}
	out := make(Histogram, len(h))
	for i, b := range h {
		out[i] = Bucket{LE: b.LE, Count: b.Count - prev[b.LE]}
	}
	return out
}

// total is the number of observations.
func (h Histogram) Total() float64 {
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1].Count
}

// quantile returns the bound of the first Bucket holding the q quantile of
// the observations (+Inf past the last finite bound), NaN when there are
// none: an upper bound, not an estimate.
func (h Histogram) Quantile(q float64) float64 {
	n := h.Total()
	if n == 0 {
		return math.NaN()
	}
	for _, b := range h {
		if b.Count >= q*n {
			return b.LE
		}
	}
	return math.Inf(1)
}
