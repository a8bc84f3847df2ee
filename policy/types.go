package policy

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/policy/internal/yamlnode"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

// Duration is a time.Duration written as a Go duration string ("250ms", "5m").
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// UnmarshalYAML implements yaml.NodeUnmarshaler so that a bad duration points
// at the user's text.
func (d *Duration) UnmarshalYAML(node ast.Node) error {
	s, ok := yamlnode.ScalarString(node)
	if !ok {
		return nodeErrorf(node, "expected a duration such as 250ms or 5m, got %s", yamlnode.Describe(node))
	}
	v, err := time.ParseDuration(s)
	switch {
	case err != nil && durationSyntax.MatchString(s):
		return nodeErrorf(node, "duration %q is out of range (at most 876000h, 100 years)", s)
	case err != nil:
		return nodeErrorf(node, "invalid duration %q (use Go durations such as 250ms, 30s, 5m)", s)
	case v < 0:
		return nodeErrorf(node, "duration %q must not be negative", s)
	case v > MaxDuration:
		return nodeErrorf(node, "duration %q is over 876000h (100 years), the longest accepted (the gateway keeps deadlines as nanoseconds since 1970, which end in 2262)", s)
	}
	*d = Duration(v)
	return nil
}

// MaxDuration is the longest duration a config may give: 100 years. The
// runtime keeps deadlines (an ejection's end, a session's expiry) as
// nanoseconds since 1970 in an int64, which ends in 2262; now plus a
// longer duration would wrap to the past.
const MaxDuration = 876000 * time.Hour

// durationSyntax is what time.ParseDuration reads; a string that matches
// it and still does not parse is out of range, not misspelt.
var durationSyntax = regexp.MustCompile(`^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`)

// MarshalYAML writes the duration back as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// ByteSize is a size in bytes; YAML accepts plain integers or a number with a
// B, KiB, MiB or GiB suffix ("8MiB").
type ByteSize int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}

// UnmarshalYAML implements yaml.NodeUnmarshaler.
func (b *ByteSize) UnmarshalYAML(node ast.Node) error {
	s, ok := yamlnode.ScalarString(node)
	if !ok {
		return nodeErrorf(node, "expected a size such as 8MiB, got %s", yamlnode.Describe(node))
	}
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return nodeErrorf(node, "invalid size %q (use a positive integer with an optional B, KiB, MiB, GiB, TiB, KB, MB, GB or TB suffix)", yamlnode.ScalarText(node))
	}
	*b = ByteSize(n * mult)
	return nil
}

// MarshalYAML writes the size in the largest exact unit.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

func (b ByteSize) String() string {
	best := -1
	for i, u := range sizeUnits {
		if int64(b)%u.mult == 0 && int64(b) >= u.mult && u.mult > 1 && (best < 0 || u.mult > sizeUnits[best].mult) {
			best = i
		}
	}
	if best < 0 {
		return strconv.FormatInt(int64(b), 10)
	}
	return fmt.Sprintf("%d%s", int64(b)/sizeUnits[best].mult, sizeUnits[best].suffix)
}

// Human writes the size for people: whole GiB or GB as such, else GB to
// one decimal.
func (b ByteSize) Human() string {
	switch {
	case b > 0 && b%(1<<30) == 0:
		return strconv.FormatInt(int64(b)>>30, 10) + "GiB"
	case b > 0 && b%1e9 == 0:
		return strconv.FormatInt(int64(b)/1e9, 10) + "GB"
	}
	return strconv.FormatFloat(math.Round(float64(b)/1e8)/10, 'f', -1, 64) + "GB"
}

// StringList is a YAML scalar or sequence of scalars ("a" or [a, b]).
type StringList []string

// UnmarshalYAML implements yaml.NodeUnmarshaler.
func (l *StringList) UnmarshalYAML(node ast.Node) error {
	if seq, ok := node.(*ast.SequenceNode); ok {
		out := make(StringList, 0, len(seq.Values))
		for _, v := range seq.Values {
			s, ok := yamlnode.ScalarString(v)
			if !ok {
				return nodeErrorf(v, "expected a string, got %s", yamlnode.Describe(v))
			}
			out = append(out, s)
		}
		*l = out
		return nil
	}
	s, ok := yamlnode.ScalarString(node)
	if !ok {
		return nodeErrorf(node, "expected a string or a list of strings, got %s", yamlnode.Describe(node))
	}
	*l = StringList{s}
	return nil
}

// Has reports whether s is in the list.
func (l StringList) Has(s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// NumCmp is a numeric comparison: {gt|gte|lt|lte|eq: N}, all given must hold.
// A bare number means eq.
type NumCmp struct {
	GT  *float64 `yaml:"gt,omitempty"`
	GTE *float64 `yaml:"gte,omitempty"`
	LT  *float64 `yaml:"lt,omitempty"`
	LTE *float64 `yaml:"lte,omitempty"`
	EQ  *float64 `yaml:"eq,omitempty"`
	// Auto is "gte" or "gt" for {gte: auto} or {gt: auto}: the bound is
	// the share controller's threshold (control.share).
	Auto string `yaml:"-"`
}

// MarshalYAML writes the comparison back as it was given.
func (c NumCmp) MarshalYAML() (any, error) {
	out := yaml.MapSlice{}
	for _, b := range []struct {
		op string
		v  *float64
	}{{"gt", c.GT}, {"gte", c.GTE}, {"lt", c.LT}, {"lte", c.LTE}, {"eq", c.EQ}} {
		switch {
		case c.Auto == b.op:
			out = append(out, yaml.MapItem{Key: b.op, Value: "auto"})
		case b.v != nil:
			out = append(out, yaml.MapItem{Key: b.op, Value: *b.v})
		}
	}
	return out, nil
}

// UnmarshalYAML implements yaml.NodeUnmarshaler.
func (c *NumCmp) UnmarshalYAML(node ast.Node) error {
	if n, ok := yamlnode.ScalarNumber(node); ok {
		*c = NumCmp{EQ: &n}
		return nil
	}
	m, ok := node.(*ast.MappingNode)
	if !ok {
		return nodeErrorf(node, "expected a number or {gt|gte|lt|lte|eq: N}, got %s", yamlnode.Describe(node))
	}
	var out NumCmp
	for _, kv := range m.Values {
		key := yamlnode.KeyString(kv)
		if v, ok := yamlnode.ScalarString(kv.Value); ok && v == "auto" {
			if key != "gte" && key != "gt" {
				return nodeErrorf(kv.Value, "%s: auto is a lower bound: use gte: auto or gt: auto", key)
			}
			if out.Auto != "" {
				return nodeErrorf(kv.Key, "one auto bound per comparison")
			}
			out.Auto = key
			continue
		}
		n, ok := yamlnode.ScalarNumber(kv.Value)
		if !ok {
			return nodeErrorf(kv.Value, "%s: expected a number or auto, got %s", key, yamlnode.Describe(kv.Value))
		}
		var dst **float64
		switch key {
		case "gt":
			dst = &out.GT
		case "gte":
			dst = &out.GTE
		case "lt":
			dst = &out.LT
		case "lte":
			dst = &out.LTE
		case "eq":
			dst = &out.EQ
		default:
			return nodeErrorf(kv.Key, "unknown comparison %q (known: gt, gte, lt, lte, eq)", key)
		}
		if *dst != nil {
			return nodeErrorf(kv.Key, "duplicate key %q", key)
		}
		*dst = &n
	}
	if out == (NumCmp{}) {
		return nodeErrorf(node, "empty comparison: give at least one of gt, gte, lt, lte, eq")
	}
	*c = out
	return nil
}

// Match reports whether v satisfies every bound given; an auto bound
// compares with auto, the controller's threshold.
func (c *NumCmp) Match(v float64) bool { return c.MatchAuto(v, 0) }

// MatchAuto is Match with auto as the auto bound's value.
func (c *NumCmp) MatchAuto(v, auto float64) bool {
	if c == nil {
		return true
	}
	switch c.Auto {
	case "gte":
		if v < auto {
			return false
		}
	case "gt":
		if v <= auto {
			return false
		}
	}
	return (c.GT == nil || v > *c.GT) && (c.GTE == nil || v >= *c.GTE) &&
		(c.LT == nil || v < *c.LT) && (c.LTE == nil || v <= *c.LTE) &&
		(c.EQ == nil || v == *c.EQ)
}

func (c *NumCmp) String() string {
	var parts []string
	add := func(op string, p *float64) {
		if p != nil {
			parts = append(parts, op+" "+strconv.FormatFloat(*p, 'g', -1, 64))
		}
	}
	switch c.Auto {
	case "gt":
		parts = append(parts, "> auto")
	case "gte":
		parts = append(parts, ">= auto")
	}
	add(">", c.GT)
	add(">=", c.GTE)
	add("<", c.LT)
	add("<=", c.LTE)
	add("==", c.EQ)
	return strings.Join(parts, " and ")
}

// ParamCount is a model's number of parameters, written as a number with
// an optional K, M, B (billions) or T suffix: 30B, 1.5T, 7000000000.
type ParamCount int64

var paramUnits = []struct {
	suffix string
	mult   float64
}{{"T", 1e12}, {"B", 1e9}, {"M", 1e6}, {"K", 1e3}}

// UnmarshalYAML implements yaml.NodeUnmarshaler.
func (c *ParamCount) UnmarshalYAML(node ast.Node) error {
	s, ok := yamlnode.ScalarString(node)
	if !ok {
		return nodeErrorf(node, "expected a parameter count such as 30B, got %s", yamlnode.Describe(node))
	}
	s = strings.TrimSpace(s)
	mult := 1.0
	for _, u := range paramUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || math.IsInf(f*mult, 0) || f*mult > math.MaxInt64/8 {
		return nodeErrorf(node, "invalid parameter count %q (use a positive number with an optional K, M, B or T suffix, such as 30B)", yamlnode.ScalarText(node))
	}
	*c = ParamCount(f * mult)
	return nil
}

// MarshalYAML writes the count as the file would: 30B.
func (c ParamCount) MarshalYAML() (any, error) { return c.String(), nil }

func (c ParamCount) String() string {
	for _, u := range paramUnits {
		if v := float64(c) / u.mult; v >= 1 {
			return strconv.FormatFloat(v, 'f', -1, 64) + u.suffix
		}
	}
	return strconv.FormatInt(int64(c), 10)
}
