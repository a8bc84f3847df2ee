package yamlnode

import (
	"fmt"
	"strconv"

	"github.com/goccy/go-yaml/ast"
)

func MappingPairs(node ast.Node) ([]*ast.MappingValueNode, bool) {
	switch n := node.(type) {
	case *ast.MappingNode:
		return n.Values, true
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{n}, true
	}
	return nil, false
}

func KeyString(kv *ast.MappingValueNode) string {
	if s, ok := ScalarString(kv.Key); ok {
		return s
	}
	return kv.Key.String()
}

func ScalarString(node ast.Node) (string, bool) {
	switch n := node.(type) {
	case *ast.StringNode:
		return n.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.LiteralNode:
		return ScalarText(n), true
	}
	return "", false
}

func ScalarText(node ast.Node) string {
	if tk := node.GetToken(); tk != nil {
		return tk.Value
	}
	return node.String()
}

func ScalarNumber(node ast.Node) (float64, bool) {
	switch n := node.(type) {
	case *ast.IntegerNode:
		// YAML integers may be written 0x1F, 0o17 or 1_000.
		if i, err := strconv.ParseInt(ScalarText(n), 0, 64); err == nil {
			return float64(i), true
		}
		f, err := strconv.ParseFloat(ScalarText(n), 64)
		return f, err == nil
	case *ast.FloatNode:
		f, err := strconv.ParseFloat(ScalarText(n), 64)
		return f, err == nil
	}
	return 0, false
}

func Describe(node ast.Node) string {
	switch node.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.NullNode, nil:
		return "nothing"
	case *ast.BoolNode:
		return "a boolean"
	case *ast.IntegerNode, *ast.FloatNode:
		return "a number"
	}
	return fmt.Sprintf("%q", ScalarText(node))
}

func NodeTypeName(t ast.NodeType) string {
	switch t {
	case ast.MappingType, ast.MappingValueType:
		return "a mapping"
	case ast.SequenceType:
		return "a list"
	case ast.StringType, ast.LiteralType:
		return "a string"
	case ast.IntegerType, ast.FloatType, ast.InfinityType, ast.NanType:
		return "a number"
	case ast.BoolType:
		return "a boolean"
	case ast.NullType:
		return "nothing"
	}
	return "a value"
}

func Position(node ast.Node) (line, col int) {
	if node == nil {
		return 1, 1
	}
	if mv, ok := node.(*ast.MappingValueNode); ok {
		node = mv.Key
	}
	if m, ok := node.(*ast.MappingNode); ok && len(m.Values) > 0 {
		node = m.Values[0].Key
	}
	tk := node.GetToken()
	if tk == nil || tk.Position == nil {
		return 1, 1
	}
	return tk.Position.Line, tk.Position.Column
}
