package bench

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// table is one markdown table of the report: a heading, the column
// heads, rows of cells and notes printed below it.
type table struct {
	title string
	head  []string
	rows  [][]string
	notes []string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// markdown renders t; a cell's "|" would end the cell and is escaped.
func (t *table) markdown() string {
	var b strings.Builder
	row := func(cells []string) {
		b.WriteString("|")
		for i := range t.head {
			c := ""
			if i < len(cells) {
				c = strings.ReplaceAll(cells[i], "|", `\|`)
			}
			b.WriteString(" " + c + " |")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "### %s\n\n", t.title)
	row(t.head)
	b.WriteString("|" + strings.Repeat("---|", len(t.head)) + "\n")
	for _, r := range t.rows {
		row(r)
	}
	if len(t.notes) > 0 {
		b.WriteString("\n")
		for _, n := range t.notes {
			b.WriteString(n + "\n")
		}
	}
	return b.String()
}

// ms formats a duration in milliseconds, to 0.1 ms.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// ratio formats a/b to two decimals (or "-" without b).
func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

// mib formats a byte count in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// kib formats KiB as MB (10^6 bytes, as the figures).
func kib(n int64) string { return fmt.Sprintf("%.2f MB", float64(n)*1024/1e6) }

// sample is a set of measured durations.
type sample []time.Duration

func (s sample) sorted() sample {
	c := append(sample(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c
}

// median is the middle value (the lower of the two middle ones).
func (s sample) median() time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s.sorted()[(len(s)-1)/2]
}

// spread is "min-max" of s.
func (s sample) spread() string {
	if len(s) == 0 {
		return "-"
	}
	c := s.sorted()
	return fmt.Sprintf("%.1f-%.1f", float64(c[0].Microseconds())/1000, float64(c[len(c)-1].Microseconds())/1000)
}
