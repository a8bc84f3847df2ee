package policy

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/switchyard/switchyard/policy/internal/yamlnode"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// Error is one problem in a config file, pointing at the user's text.
// Its string form is FILE:LINE:COL: message.
type Error struct {
	File string
	Line int
	Col  int
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// Errors lists the problems found in a config file, in file order.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.Is and errors.As see every problem.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// nodeError is returned by the custom unmarshalers; it carries the node so
// the loader can turn it into a positioned Error.
type nodeError struct {
	node ast.Node
	msg  string
}

func (e *nodeError) Error() string { return e.msg }

func nodeErrorf(node ast.Node, format string, args ...any) error {
	return &nodeError{node: node, msg: fmt.Sprintf(format, args...)}
}

// collector gathers positioned errors for one file.
type collector struct {
	file string
	errs Errors
}

func (c *collector) at(node ast.Node, format string, args ...any) {
	line, col := yamlnode.Position(node)
	c.errs = append(c.errs, &Error{File: c.file, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)})
}

// decodeErr turns an error from goccy/go-yaml or a custom unmarshaler into a
// positioned Error; fallback locates errors that carry no position.
func (c *collector) decodeErr(err error, fallback ast.Node, context string) {
	prefix := ""
	if context != "" {
		prefix = context + ": "
	}
	var ne *nodeError
	if errors.As(err, &ne) {
		c.at(ne.node, "%s%s", prefix, ne.msg)
		return
	}
	var ye yaml.Error
	if errors.As(err, &ye) {
		line, col := yamlnode.Position(fallback)
		tk := ye.GetToken()
		msg := ye.GetMessage()
		var se *yaml.SyntaxError
		if errors.As(err, &se) && tk != nil && tk.Position != nil && tk.Next != nil && tk.Next.Position != nil &&
			tk.Next.Type == token.MappingValueType && tk.Next.Position.Line > tk.Position.Line {
			// A plain scalar ran on past a line break ("a: 1\n   b: 2" reads
			// as the key "1 b"); goccy/go-yaml points at the scalar's start, but
			// the mistake is the indentation of the line holding the ':'.
			tk = tk.Next
			msg += " (check the indentation of this line)"
		} else if errors.As(err, &se) && tk != nil && tk.Position != nil && firstOnLine(tk) &&
			(strings.Contains(msg, "not allowed in this context") || strings.Contains(msg, "non-map value is specified")) {
			// The first thing on its line cannot go where its indentation
			// puts it: a key or list item in line with nothing above it, or
			// a list item dedented to where a key belongs. Say which columns
			// would fit, rather than guess which way it went wrong.
			if hint := indentationHint(tk, strings.Contains(msg, "non-map value")); hint != "" {
				msg = hint
			} else {
				msg += " (check the indentation of this line)"
			}
		}
		switch {
		case strings.Contains(msg, "'\t'"):
			msg = "a tab character: YAML indents with spaces only (replace the tabs on this line)"
		case errors.As(err, &se) && (strings.Contains(msg, "'}' must be specified") || strings.Contains(msg, "']' must be specified")):
			msg += " (is a { or [ on this or an earlier line left unclosed?)"
		}
		if tk != nil && tk.Position != nil {
			line, col = tk.Position.Line, tk.Position.Column
		}
		// Name the offending value by its keys in the user's text, not by
		// the Go struct field the decoder was filling.
		path, val := pathTo(fallback, tk)
		// A block mapping's token is its first ':'; point at its first key.
		switch v := val.(type) {
		case *ast.MappingValueNode:
			line, col = yamlnode.Position(v)
		case *ast.MappingNode:
			if !v.IsFlowStyle {
				line, col = yamlnode.Position(v)
			}
		}
		var (
			te *yaml.TypeError
			ue *yaml.UnexpectedNodeTypeError
			oe *yaml.OverflowError
		)
		switch {
		case errors.As(err, &te):
			msg = typeErrorMessage(te, val)
		case errors.As(err, &ue):
			msg = fmt.Sprintf("expected %s, got %s", yamlnode.NodeTypeName(ue.Expected), yamlnode.NodeTypeName(ue.Actual))
		case errors.As(err, &oe):
			msg = fmt.Sprintf("%s is out of range", oe.SrcNum)
		}
		if path != "" {
			msg = path + ": " + msg
		}
		c.errs = append(c.errs, &Error{File: c.file, Line: line, Col: col, Msg: prefix + msg})
		return
	}
	c.at(fallback, "%s%v", prefix, err)
}

// firstOnLine reports whether tk begins its line.
func firstOnLine(tk *token.Token) bool {
	return tk.Prev == nil || tk.Prev.Position == nil || tk.Prev.Position.Line < tk.Position.Line
}

// pathTo finds, under node, the value whose token is tk, and returns the
// keys leading to it ("when: stream", "nodes[1]") and the value itself. A
// nil value means tk is not under node.
func pathTo(node ast.Node, tk *token.Token) (string, ast.Node) {
	if node == nil || tk == nil {
		return "", nil
	}
	if node.GetToken() == tk {
		return "", node
	}
	join := func(step, rest string) string {
		switch {
		case rest == "":
			return step
		case strings.HasPrefix(rest, "["):
			return step + rest
		}
		return step + ": " + rest
	}
	switch n := node.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		kvs, _ := yamlnode.MappingPairs(n)
		for _, kv := range kvs {
			if rest, v := pathTo(kv.Value, tk); v != nil {
				return join(yamlnode.KeyString(kv), rest), v
			}
		}
	case *ast.SequenceNode:
		for i, item := range n.Values {
			if rest, v := pathTo(item, tk); v != nil {
				return join(fmt.Sprintf("[%d]", i), rest), v
			}
		}
	case *ast.AnchorNode:
		return pathTo(n.Value, tk)
	case *ast.TagNode:
		return pathTo(n.Value, tk)
	}
	return "", nil
}

func typeErrorMessage(te *yaml.TypeError, val ast.Node) string {
	want := te.DstType.String()
	switch te.DstType.Kind().String() {
	case "int", "int64", "int32":
		want = "an integer"
	case "float64":
		want = "a number"
	case "bool":
		want = "true or false"
	case "string":
		want = "a string"
	case "slice":
		want = "a list"
	case "map", "struct":
		want = "a mapping"
	}
	got := "a value"
	if val != nil {
		got = yamlnode.Describe(val)
	} else if te.SrcType != nil {
		switch te.SrcType.Kind().String() {
		case "string":
			got = "a string"
		case "uint64", "int64", "int":
			got = "an integer"
		case "float64":
			got = "a number"
		case "bool":
			got = "a boolean"
		case "slice":
			got = "a list"
		case "map":
			got = "a mapping"
		}
	}
	return fmt.Sprintf("expected %s, got %s", want, got)
}

func (c *collector) result() error {
	if len(c.errs) == 0 {
		return nil
	}
	sort.SliceStable(c.errs, func(i, j int) bool {
		a, b := c.errs[i], c.errs[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return c.errs
}
