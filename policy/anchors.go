package policy

import (
	"github.com/goccy/go-yaml/ast"
	"github.com/switchyard/switchyard/policy/internal/yamlnode"
)

// resolveAnchors replaces every alias (*name) with the node its anchor
// (&name) marks, drops the anchors, and expands merge keys (<<: *base, or
// a list of them; keys written in the mapping win). The loader decodes each
// section on its own so that independent errors are all reported; resolving
// first lets an alias in one section use an anchor of another. Errors in an
// aliased node point at the anchored text.
func (d *decoder) resolveAnchors(root ast.Node) ast.Node {
	anchors := map[string]ast.Node{}
	var walk func(n ast.Node) ast.Node
	walk = func(n ast.Node) ast.Node {
		switch v := n.(type) {
		case *ast.AnchorNode:
			val := walk(v.Value)
			if name, ok := yamlnode.ScalarString(v.Name); ok {
				anchors[name] = val
			}
			return val
		case *ast.AliasNode:
			name, _ := yamlnode.ScalarString(v.Value)
			if target, ok := anchors[name]; ok {
				return target
			}
			d.c.at(v, "alias *%s: no anchor &%s is defined before it", name, name)
			return v
		case *ast.MappingNode:
			for _, kv := range v.Values {
				kv.Value = walk(kv.Value)
			}
			v.Values = d.expandMerges(v.Values)
		case *ast.MappingValueNode:
			v.Value = walk(v.Value)
			if v.Key.Type() == ast.MergeKeyType {
				if merged := d.expandMerges([]*ast.MappingValueNode{v}); len(merged) > 0 {
					return &ast.MappingNode{BaseNode: v.BaseNode, Start: v.Start, Values: merged}
				}
			}
		case *ast.SequenceNode:
			for i := range v.Values {
				v.Values[i] = walk(v.Values[i])
			}
		}
		return n
	}
	return walk(root)
}

// expandMerges replaces merge keys by the pairs of the mappings they name,
// skipping keys the mapping sets itself.
func (d *decoder) expandMerges(kvs []*ast.MappingValueNode) []*ast.MappingValueNode {
	hasMerge := false
	own := map[string]bool{}
	for _, kv := range kvs {
		if kv.Key.Type() == ast.MergeKeyType {
			hasMerge = true
		} else {
			own[yamlnode.KeyString(kv)] = true
		}
	}
	if !hasMerge {
		return kvs
	}
	out := make([]*ast.MappingValueNode, 0, len(kvs))
	for _, kv := range kvs {
		if kv.Key.Type() != ast.MergeKeyType {
			out = append(out, kv)
			continue
		}
		sources := []ast.Node{kv.Value}
		if seq, ok := kv.Value.(*ast.SequenceNode); ok {
			sources = seq.Values
		}
		for _, src := range sources {
			pairs, ok := yamlnode.MappingPairs(src)
			if !ok {
				d.c.at(src, "<<: expected a mapping (or a list of mappings) to merge, got %s", yamlnode.Describe(src))
				continue
			}
			for _, p := range pairs {
				if k := yamlnode.KeyString(p); !own[k] {
					own[k] = true
					out = append(out, p)
				}
			}
		}
	}
	return out
}
