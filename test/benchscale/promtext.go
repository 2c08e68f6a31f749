package main

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text format: a metric name, its
// labels and its value.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape is one /metrics page, parsed. The bench reads a few counters and
// histograms from it, so a small reader of the text format does (the
// exposition parser lives in a module the product does not depend on).
type scrape []sample

// parseScrape reads the text format; comment lines and lines it cannot read
// are skipped.
func parseScrape(text string) scrape {
	var out scrape
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

func parseSample(line string) (sample, bool) {
	s := sample{labels: map[string]string{}}
	var rest string
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return s, false
	} else if line[i] == '{' {
		end := strings.LastIndex(line, "}")
		if end < i {
			return s, false
		}
		s.name, rest = line[:i], line[end+1:]
		parseLabels(line[i+1:end], s.labels)
	} else {
		s.name, rest = line[:i], line[i:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, false
	}
	s.value = v
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
func (s scrape) sum(name string, match map[string]string) float64 {
	var total float64
	for _, x := range s {
		if x.name == name && hasAll(x.labels, match) {
			total += x.value
		}
	}
	return total
}

// by adds the values of name per value of label.
func (s scrape) by(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, x := range s {
		if x.name == name {
			out[x.labels[label]] += x.value
		}
	}
	return out
}

// histogram returns the cumulative buckets of name (summed over its other
// labels), ordered by bound.
func (s scrape) histogram(name string) histogram {
	byBound := map[float64]float64{}
	for _, x := range s {
		if x.name != name+"_bucket" {
			continue
		}
		le, err := strconv.ParseFloat(x.labels["le"], 64)
		if err != nil {
			continue
		}
		byBound[le] += x.value
	}
	h := make(histogram, 0, len(byBound))
	for le, n := range byBound {
		h = append(h, bucket{LE: le, Count: n})
	}
	sort.Slice(h, func(i, j int) bool { return h[i].LE < h[j].LE })
	return h
}

func hasAll(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// bucket is one cumulative histogram bucket: Count observations <= LE.
type bucket struct {
	LE    float64
	Count float64
}

// MarshalJSON writes the bound as Prometheus does, "+Inf" included, which
// JSON numbers cannot hold.
func (b bucket) MarshalJSON() ([]byte, error) { //nolint:unparam // json.Marshaler's signature
	return fmt.Appendf(nil, `{"le":%q,"count":%g}`, strconv.FormatFloat(b.LE, 'g', -1, 64), b.Count), nil
}

// histogram is cumulative buckets ordered by bound, the last one +Inf.
type histogram []bucket

// minus is h less an earlier reading of the same histogram: what was
// observed in between.
func (h histogram) minus(before histogram) histogram {
	prev := map[float64]float64{}
	for _, b := range before {
		prev[b.LE] = b.Count
	}
	out := make(histogram, len(h))
	for i, b := range h {
		out[i] = bucket{LE: b.LE, Count: b.Count - prev[b.LE]}
	}
	return out
}

// total is the number of observations.
func (h histogram) total() float64 {
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1].Count
}

// quantile returns the bound of the first bucket holding the q quantile of
// the observations (+Inf past the last finite bound), NaN when there are
// none: an upper bound, not an estimate.
func (h histogram) quantile(q float64) float64 {
	n := h.total()
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
