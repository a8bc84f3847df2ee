package policy

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/policy/internal/yamlnode"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// LoadOptions names the strategies other packages provide, so that one
// registry per family decides what a config may name.
type LoadOptions struct {
	// Balancers are the valid pools.*.balance values.
	Balancers []string
	// Classifiers are the valid classifier.kind values.
	Classifiers []string
	// Getenv reads key_env variables; nil means os.Getenv.
	Getenv func(string) string
	// SkipEnv leaves the *_env variables unread and unchecked (their
	// secrets stay empty): a config can then be validated without its
	// secrets, as in CI. Serving needs them, so serve never sets it.
	SkipEnv bool
}

// LoadFile reads and validates the config at path.
func LoadFile(path string, reg LoadOptions) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Load(path, data, reg)
}

// Load reads a config in four steps: decode (strictly, over the defaults),
// validate (pure: every problem in one run), resolve the secrets the *_env
// keys name (unless reg.SkipEnv), and compile what the runtime needs. A
// non-nil error is an Errors value listing every problem found, each as
// FILE:LINE:COL: message. The Config returned is not changed afterwards.
func Load(file string, data []byte, reg LoadOptions) (*Config, error) {
	c := &collector{file: file}
	cfg, broken, hidden := decode(c, file, data)
	if cfg == nil {
		return nil, c.result()
	}
	// The semantic checks run on every part that decoded, so one run
	// reports every independent problem; the parts that did not decode
	// (broken) are skipped, and references to them (a route's pool) are
	// taken as valid rather than reported again.
	at := positions{c: c, root: cfg.root, broken: broken, hidden: hidden}
	(&validator{positions: at, cfg: cfg, reg: reg}).validate()
	if !reg.SkipEnv {
		(&secrets{positions: at, cfg: cfg, getenv: reg.getenv}).resolve()
	}
	if err := c.result(); err != nil {
		return nil, err
	}
	cfg.compile()
	return cfg, nil
}

func (r LoadOptions) getenv(name string) string {
	if r.Getenv != nil {
		return r.Getenv(name)
	}
	return os.Getenv(name)
}

// decode parses data and decodes it over the defaults, reporting into c.
// It returns the config (nil when nothing can be checked further) and the
// parts that did not decode.
func decode(c *collector, file string, data []byte) (*Config, map[string]bool, map[ast.Node]bool) {
	// Duplicate keys are left to the decoder, which reports each one in
	// context without stopping at the first.
	f, err := parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey())
	if err != nil {
		c.decodeErr(err, nil, "")
		return nil, nil, nil
	}
	var docs []ast.Node
	for _, doc := range f.Docs {
		switch doc.Body.(type) {
		case nil, *ast.DirectiveNode:
			// An empty document (a trailing ---) or a %YAML directive, which
			// goccy/go-yaml returns as a document of its own.
			continue
		}
		docs = append(docs, doc.Body)
	}
	var root ast.Node
	if len(docs) > 0 {
		root = docs[0]
	}
	if len(docs) > 1 {
		c.at(docs[1], "only one YAML document is allowed")
	}
	d := &decoder{c: c, broken: map[string]bool{}, hidden: map[ast.Node]bool{}}
	if d.tags(root); len(c.errs) > 0 {
		return nil, nil, nil
	}
	if root = d.resolveAnchors(root); len(c.errs) > 0 {
		return nil, nil, nil
	}
	cfg := defaultConfig(file)
	d.root(root, cfg)
	if root == nil || d.broken["config"] {
		return nil, nil, nil
	}
	cfg.root = root
	return cfg, d.broken, d.hidden
}

// compile fills in what the runtime reads and the file does not say
// directly (the replicas' parsed URLs), once the config is valid. Nothing
// changes the config after it.
func (c *Config) compile() {
	for _, pool := range c.Pools {
		for _, r := range pool.Replicas {
			r.Parsed, _ = replicaURL(r.URL) // validate checked it
		}
	}
}

type decoder struct {
	c *collector
	// broken names the parts that did not decode: "server", "topology",
	// "classifier", "models", "session", "version", "pools" and "routes"
	// (of the wrong shape), "pool:NAME", "route:INDEX", and "config" (the
	// file is not a mapping).
	broken map[string]bool
	// hidden are the nodes a salvaged part was decoded without, and the
	// salvaged parts themselves: the validator's findings there are not
	// reported (see salvage).
	hidden map[ast.Node]bool
}

var topLevelKeys = []string{"version", "server", "topology", "pools", "classifier", "models", "session", "control", "capture", "routes"}

// pairs returns a mapping's entries, reporting duplicate keys.
func (d *decoder) pairs(node ast.Node, what string) ([]*ast.MappingValueNode, bool) {
	kvs, ok := yamlnode.MappingPairs(node)
	if !ok {
		d.c.at(node, "%s: expected a mapping, got %s", what, yamlnode.Describe(node))
		return nil, false
	}
	first := map[string]*ast.MappingValueNode{}
	out := kvs[:0:0]
	for _, kv := range kvs {
		k := yamlnode.KeyString(kv)
		if f, dup := first[k]; dup {
			line, _ := yamlnode.Position(f.Key)
			d.c.at(kv.Key, "%s: duplicate key %q (first at line %d)", what, k, line)
			continue
		}
		first[k] = kv
		out = append(out, kv)
	}
	return out, true
}

var nodeUnmarshalerType = reflect.TypeFor[yaml.NodeUnmarshaler]()

// shape checks node against the YAML shape of t before it is decoded: every
// mapping key must be one t declares, no key may repeat, and a list of
// structs may not hold empty entries. goccy/go-yaml alone stops at one
// unknown field per struct, picks it at random when there are several, and
// never says which keys are valid; so unknown keys are found here, and the
// decoder ignores them. Type mismatches are left to the decoder. It returns
// false when the node cannot be decoded as it stands (a duplicate key, an
// empty entry); an unknown key alone does not stop the decoding.
func (d *decoder) shape(node ast.Node, t reflect.Type, what string) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(nodeUnmarshalerType) {
		return true // the type reads its own node
	}
	ok := true
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		all, isMap := yamlnode.MappingPairs(node)
		if !isMap {
			return true
		}
		kvs, _ := d.pairs(node, what)
		ok = len(kvs) == len(all)
		names, fields := yamlFields(t)
		for _, kv := range kvs {
			if kv.Key.Type() == ast.MergeKeyType {
				continue // `<<: *alias` is resolved by the decoder
			}
			k := yamlnode.KeyString(kv)
			ft, known := fields[k]
			if t.Kind() == reflect.Map {
				ft, known = t.Elem(), true
			}
			if !known {
				// Reported, and ignored by the decoder: the rest of the
				// part still decodes and is checked, so its other
				// problems are reported in the same run.
				d.c.at(kv.Key, "%s: unknown key %q (known: %s)", what, k, strings.Join(names, ", "))
				continue
			}
			ok = d.shape(kv.Value, ft, what+": "+k) && ok
		}
	case reflect.Slice:
		seq, isSeq := node.(*ast.SequenceNode)
		if !isSeq {
			return true
		}
		elem := t.Elem()
		for elem.Kind() == reflect.Pointer {
			elem = elem.Elem()
		}
		structs := elem.Kind() == reflect.Struct && !reflect.PointerTo(elem).Implements(nodeUnmarshalerType)
		for i, item := range seq.Values {
			at := fmt.Sprintf("%s[%d]", what, i)
			if _, null := item.(*ast.NullNode); null && structs {
				d.c.at(item, "%s: expected a mapping, got nothing", at)
				ok = false
				continue
			}
			ok = d.shape(item, t.Elem(), at) && ok
		}
	}
	return ok
}

// yamlFields lists the keys a struct accepts, in declaration order, with
// the type each one decodes into (none for other types).
func yamlFields(t reflect.Type) ([]string, map[string]reflect.Type) {
	if t.Kind() != reflect.Struct {
		return nil, nil
	}
	var names []string
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		names = append(names, name)
		fields[name] = f.Type
	}
	return names, fields
}

// value decodes one part of the file (a section, a pool, a route) into
// dst, which holds the part's defaults. It reports every problem of the
// part and returns false when nothing of it could be decoded. A part with
// values that do not decode (a wrong type, a duplicate key) is decoded
// without them (see salvage), so the rest of it is still checked.
func (d *decoder) value(node ast.Node, dst any, what string) bool {
	if _, null := node.(*ast.NullNode); null || node == nil {
		return true
	}
	t := reflect.TypeOf(dst)
	defaults := reflect.New(t.Elem())
	defaults.Elem().Set(reflect.ValueOf(dst).Elem())
	if d.shape(node, t, what) {
		err := decodeNode(node, dst)
		if err == nil {
			return true
		}
		// goccy/go-yaml stops at the first bad value; decode the parts one
		// by one to report every bad value of the section.
		if d.partErrors(node, t, what) == 0 {
			d.c.decodeErr(err, node, what)
			return false
		}
	} else {
		// A duplicate key or an empty entry (reported by shape); the
		// values may still hold wrong types. The decoder would report
		// the duplicates again: it is shown the node without them.
		d.partErrors(withoutRepeats(node, t), t, what)
	}
	return d.salvage(node, dst, defaults.Elem())
}

// salvage decodes node into dst (reset to defaults) without the values
// that do not decode or repeat a key, all of them reported already, so
// that the rest of the part is validated like any other: three mistakes
// in one pool, of any kind, are three errors in one run. The validator's
// findings at a value left out, or at the part itself (a required key
// that was left out), are dropped: they would be the consequences of a
// mistake already reported. (prune marks them.) It returns false when the part cannot be
// decoded even so (an entry of a list that cannot be left out without
// moving the others).
func (d *decoder) salvage(node ast.Node, dst any, defaults reflect.Value) bool {
	pruned, ok := d.prune(node, reflect.TypeOf(dst))
	if !ok {
		return false
	}
	reflect.ValueOf(dst).Elem().Set(defaults)
	return decodeNode(pruned, dst) == nil
}

// prune returns node without the mapping entries that do not decode into
// their declared types (descending into mappings and lists) and without
// repeated keys (the first one is kept, as the error says), marking what
// it leaves out as hidden. ok is false when node itself cannot be decoded
// into t.
func (d *decoder) prune(node ast.Node, t reflect.Type) (_ ast.Node, ok bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	decodes := func() bool { return decodeNode(node, reflect.New(t).Interface()) == nil }
	if reflect.PointerTo(t).Implements(nodeUnmarshalerType) {
		return node, decodes()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		kvs, isMap := yamlnode.MappingPairs(node)
		if !isMap {
			return node, decodes()
		}
		_, fields := yamlFields(t)
		seen := map[string]bool{}
		keep := make([]*ast.MappingValueNode, 0, len(kvs))
		changed := false
		for _, kv := range kvs {
			k := yamlnode.KeyString(kv)
			ft, known := fields[k]
			if t.Kind() == reflect.Map {
				ft, known = t.Elem(), true
			}
			if kv.Key.Type() == ast.MergeKeyType || !known {
				keep = append(keep, kv) // resolved, or ignored, by the decoder
				continue
			}
			if seen[k] {
				d.hide(kv)
				changed = true
				continue
			}
			seen[k] = true
			v, ok := d.prune(kv.Value, ft)
			if !ok {
				d.hide(kv)
				changed = true
				continue
			}
			if v != kv.Value {
				changed = true
				c := *kv
				c.Value = v
				kv = &c
			}
			keep = append(keep, kv)
		}
		if changed {
			// What the validator says of the mapping itself (a key
			// missing, two keys that disagree) may be about a value left
			// out.
			d.hidden[node] = true
		}
		return ast.Mapping(node.GetToken(), false, keep...), true
	case reflect.Slice:
		seq, isSeq := node.(*ast.SequenceNode)
		if !isSeq {
			return node, decodes()
		}
		elem := t.Elem()
		for elem.Kind() == reflect.Pointer {
			elem = elem.Elem()
		}
		c := *seq
		c.Values = make([]ast.Node, len(seq.Values))
		for i, item := range seq.Values {
			if _, null := item.(*ast.NullNode); null && elem.Kind() == reflect.Struct {
				return nil, false
			}
			v, ok := d.prune(item, t.Elem())
			if !ok {
				return nil, false // leaving it out would move the entries after it
			}
			if v != item {
				d.hidden[node] = true
			}
			c.Values[i] = v
		}
		return &c, true
	}
	return node, decodes()
}

// withoutRepeats returns node without the repeated keys shape reports
// (the first of each is kept), in the mappings shape checks; types that
// read their own node keep theirs.
func withoutRepeats(node ast.Node, t reflect.Type) ast.Node {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(nodeUnmarshalerType) {
		return node
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		kvs, isMap := yamlnode.MappingPairs(node)
		if !isMap {
			return node
		}
		_, fields := yamlFields(t)
		seen := map[string]bool{}
		keep := make([]*ast.MappingValueNode, 0, len(kvs))
		for _, kv := range kvs {
			k := yamlnode.KeyString(kv)
			ft, known := fields[k]
			if t.Kind() == reflect.Map {
				ft, known = t.Elem(), true
			}
			if kv.Key.Type() == ast.MergeKeyType || !known {
				keep = append(keep, kv)
				continue
			}
			if seen[k] {
				continue
			}
			seen[k] = true
			if v := withoutRepeats(kv.Value, ft); v != kv.Value {
				c := *kv
				c.Value = v
				kv = &c
			}
			keep = append(keep, kv)
		}
		return ast.Mapping(node.GetToken(), false, keep...)
	case reflect.Slice:
		seq, isSeq := node.(*ast.SequenceNode)
		if !isSeq {
			return node
		}
		c := *seq
		c.Values = make([]ast.Node, len(seq.Values))
		for i, item := range seq.Values {
			c.Values[i] = withoutRepeats(item, t.Elem())
		}
		return &c
	}
	return node
}

// hide marks every node under n as left out of the decoding.
func (d *decoder) hide(n ast.Node) {
	eachNode(n, func(n ast.Node) bool { d.hidden[n] = true; return true })
}

// eachNode calls f for n and, while f returns true, for the nodes under it.
func eachNode(n ast.Node, f func(ast.Node) bool) {
	if n == nil || !f(n) {
		return
	}
	switch v := n.(type) {
	case *ast.MappingNode:
		for _, kv := range v.Values {
			eachNode(kv, f)
		}
	case *ast.MappingValueNode:
		eachNode(v.Key, f)
		eachNode(v.Value, f)
	case *ast.MappingKeyNode:
		eachNode(v.Value, f)
	case *ast.SequenceNode:
		for _, item := range v.Values {
			eachNode(item, f)
		}
	case *ast.AnchorNode:
		eachNode(v.Value, f)
	}
}

// partErrors decodes each key of a mapping (each entry of a list) on its
// own into its declared type and reports the ones that fail, descending
// into nested structs and lists. It returns how many it reported.
func (d *decoder) partErrors(node ast.Node, t reflect.Type, what string) int {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(nodeUnmarshalerType) {
		return 0
	}
	n := 0
	try := func(part ast.Node, ft reflect.Type, at string) {
		if _, null := part.(*ast.NullNode); null {
			return
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if err := decodeNode(part, reflect.New(ft).Interface()); err != nil {
			if sub := d.partErrors(part, ft, at); sub > 0 {
				n += sub
				return
			}
			d.c.decodeErr(err, part, at)
			n++
		}
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		kvs, ok := yamlnode.MappingPairs(node)
		if !ok {
			return 0
		}
		_, fields := yamlFields(t)
		for _, kv := range kvs {
			ft, known := fields[yamlnode.KeyString(kv)]
			if t.Kind() == reflect.Map {
				ft, known = t.Elem(), true
			}
			if known {
				try(kv.Value, ft, what+": "+yamlnode.KeyString(kv))
			}
		}
	case reflect.Slice:
		seq, ok := node.(*ast.SequenceNode)
		if !ok {
			return 0
		}
		for i, item := range seq.Values {
			try(item, t.Elem(), fmt.Sprintf("%s[%d]", what, i))
		}
	}
	return n
}

// decodeNode decodes node into dst. A panic inside goccy/go-yaml becomes an
// error at node: a bad file must not take down a running gateway on reload.
func decodeNode(node ast.Node, dst any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = nodeErrorf(node, "cannot decode this value: %v", r)
		}
	}()
	// Unknown keys were reported by shape, which knows every type's keys.
	return yaml.NodeToValue(node, dst)
}

// tags reports every YAML tag (!foo, !!str). Nothing in the config needs
// one, the loader's own readers do not look through them, and goccy/go-yaml
// v1.19 panics decoding some (`nodes: !!seq`).
func (d *decoder) tags(node ast.Node) {
	eachNode(node, func(n ast.Node) bool {
		if tag, ok := n.(*ast.TagNode); ok {
			d.c.at(tag, "YAML tags such as %s are not supported", yamlnode.ScalarText(tag))
			return false
		}
		return true
	})
}

func (d *decoder) root(root ast.Node, cfg *Config) {
	if root == nil {
		d.c.at(nil, "empty config: expected a mapping with version, pools and routes")
		return
	}
	kvs, ok := d.pairs(root, "config")
	if !ok {
		d.broken["config"] = true
		return
	}
	for _, kv := range kvs {
		val := kv.Value
		switch k := yamlnode.KeyString(kv); k {
		case "version":
			d.section(k, d.value(val, &cfg.Version, "version"))
		case "server":
			d.section(k, d.value(val, &cfg.Server, "server"))
		case "topology":
			t := DefaultTopology
			cfg.Topology = &t
			d.section(k, d.value(val, cfg.Topology, "topology"))
		case "pools":
			d.pools(val, cfg)
		case "classifier":
			cl := DefaultClassifier
			cfg.Classifier = &cl
			d.section(k, d.value(val, cfg.Classifier, "classifier"))
		case "models":
			d.section(k, d.value(val, &cfg.Models, "models"))
		case "session":
			se := DefaultSession
			cfg.Session = &se
			d.section(k, d.value(val, cfg.Session, "session"))
		case "control":
			cfg.Control = &Control{}
			d.section(k, d.value(val, cfg.Control, "control"))
		case "capture":
			c := DefaultCapture
			cfg.Capture = &c
			d.section(k, d.value(val, cfg.Capture, "capture"))
		case "routes":
			seq, ok := val.(*ast.SequenceNode)
			if !ok {
				d.c.at(val, "routes: expected a list of routes, got %s", yamlnode.Describe(val))
				d.broken["routes"] = true
				continue
			}
			for i, item := range seq.Values {
				r := new(Route)
				*r = DefaultRoute
				d.section(fmt.Sprintf("route:%d", i), d.value(item, r, routeContext(i, item)))
				cfg.Routes = append(cfg.Routes, r) // kept in place: the validator finds a route by its index
			}
		default:
			if strings.HasPrefix(k, "x-") {
				continue // an extension field: a place for shared anchors
			}
			d.c.at(kv.Key, "unknown key %q (known: %s; x-* keys are ignored)", k, strings.Join(topLevelKeys, ", "))
		}
	}
}

// routeContext names a route in decode errors as the validator does:
// routes[2] "hard".
func routeContext(i int, item ast.Node) string {
	what := fmt.Sprintf("routes[%d]", i)
	kvs, _ := yamlnode.MappingPairs(item)
	for _, kv := range kvs {
		if yamlnode.KeyString(kv) == "name" {
			if name, ok := yamlnode.ScalarString(kv.Value); ok {
				what += fmt.Sprintf(" %q", name)
			}
			break
		}
	}
	return what
}

func (d *decoder) pools(node ast.Node, cfg *Config) {
	kvs, ok := d.pairs(node, "pools")
	if !ok {
		d.broken["pools"] = true
		return
	}
	for _, kv := range kvs {
		name := yamlnode.KeyString(kv)
		p := new(Pool)
		*p = DefaultPool
		p.Name = name
		d.section("pool:"+name, d.value(kv.Value, p, fmt.Sprintf("pool %q", name)))
		cfg.Pools = append(cfg.Pools, p) // a broken pool still names a pool
	}
}

// section records whether the part named key decoded, and returns ok.
func (d *decoder) section(key string, ok bool) bool {
	if !ok {
		d.broken[key] = true
	}
	return ok
}

// UnmarshalYAML reads {pool: weight, ...} keeping the file's order.
func (s *Split) UnmarshalYAML(node ast.Node) error {
	kvs, ok := yamlnode.MappingPairs(node)
	if !ok {
		return nodeErrorf(node, "expected a mapping of pool: weight, got %s", yamlnode.Describe(node))
	}
	out := make(Split, 0, len(kvs))
	seen := map[string]bool{}
	for _, kv := range kvs {
		name := yamlnode.KeyString(kv)
		if seen[name] {
			return nodeErrorf(kv.Key, "duplicate pool %q", name)
		}
		seen[name] = true
		w, ok := yamlnode.ScalarNumber(kv.Value)
		if !ok || w != float64(int(w)) {
			return nodeErrorf(kv.Value, "weight of %q must be a whole number, got %s", name, yamlnode.Describe(kv.Value))
		}
		if w <= 0 {
			return nodeErrorf(kv.Value, "weight of %q must be positive, got %s", name, strconv.FormatFloat(w, 'g', -1, 64))
		}
		out = append(out, SplitEntry{Pool: name, Weight: int(w)})
	}
	*s = out
	return nil
}

// MarshalYAML writes the split back as a mapping.
func (s Split) MarshalYAML() (any, error) {
	ms := make(yaml.MapSlice, len(s))
	for i, e := range s {
		ms[i] = yaml.MapItem{Key: e.Pool, Value: e.Weight}
	}
	return ms, nil
}

// UnmarshalYAML reads a label as `name` or `{name: description}`.
func (l *LabelSpec) UnmarshalYAML(node ast.Node) error {
	if s, ok := yamlnode.ScalarString(node); ok {
		*l = LabelSpec{Name: s}
		return nil
	}
	kvs, ok := yamlnode.MappingPairs(node)
	if !ok || len(kvs) != 1 {
		return nodeErrorf(node, "label: expected a name or {name: description}, got %s", yamlnode.Describe(node))
	}
	desc, ok := yamlnode.ScalarString(kvs[0].Value)
	if !ok {
		return nodeErrorf(kvs[0].Value, "label %q: description must be a string", yamlnode.KeyString(kvs[0]))
	}
	*l = LabelSpec{Name: yamlnode.KeyString(kvs[0]), Description: desc}
	return nil
}

// lookup walks root along path (string keys and int indexes) and returns the
// deepest node it reached, so an error points as close as possible to the
// offending text. A trailing key that is absent points at its parent.
func lookup(root ast.Node, path ...any) ast.Node {
	cur := root
	for _, step := range path {
		var next ast.Node
		switch s := step.(type) {
		case string:
			kvs, _ := yamlnode.MappingPairs(cur)
			for _, kv := range kvs {
				if yamlnode.KeyString(kv) == s {
					next = kv.Value
					if _, null := next.(*ast.NullNode); null {
						next = kv.Key
					}
					break
				}
			}
		case int:
			if seq, ok := cur.(*ast.SequenceNode); ok && s >= 0 && s < len(seq.Values) {
				next = seq.Values[s]
			}
		case keyOf:
			kvs, _ := yamlnode.MappingPairs(cur)
			for _, kv := range kvs {
				if yamlnode.KeyString(kv) == string(s) {
					next = kv.Key
					break
				}
			}
		}
		if next == nil {
			return cur
		}
		cur = next
	}
	return cur
}

// keyOf in a lookup path selects a mapping key itself rather than its value.
type keyOf string
