package vllmsim

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// maxSchemaDepth bounds how deep exampleArguments follows nested objects and
// arrays, so a hostile or recursive-looking schema cannot blow the stack.
const maxSchemaDepth = 8

// exampleArguments builds the JSON arguments of a simulated call to a function
// with the given "parameters" JSON schema. It fills the required properties,
// or every property when none is required, with a plausible value for each
// type: const, enum (first value), default and examples win over the type; a
// string is chosen from the property's name and format. A missing or
// non-object schema gives "{}". The result is always valid JSON.
func exampleArguments(params gjson.Result) string {
	if !params.IsObject() {
		return "{}"
	}
	return string(appendExampleObject(nil, params, 0))
}

// appendExampleValue appends an example value for schema, a property named
// name.
func appendExampleValue(dst []byte, name string, schema gjson.Result, depth int) []byte {
	if !schema.IsObject() || depth >= maxSchemaDepth {
		return appendString(dst, exampleString(name, ""))
	}
	for _, key := range []string{"const", "default"} {
		if v := schema.Get(key); v.Exists() {
			return append(dst, v.Raw...)
		}
	}
	for _, key := range []string{"enum", "examples"} {
		if v := schema.Get(key); v.IsArray() {
			if first := v.Get("0"); first.Exists() {
				return append(dst, first.Raw...)
			}
		}
	}
	for _, key := range []string{"anyOf", "oneOf", "allOf"} {
		if v := schema.Get(key); v.IsArray() {
			var sub gjson.Result
			v.ForEach(func(_, s gjson.Result) bool {
				if s.Get("type").String() != "null" {
					sub = s
					return false
				}
				return true
			})
			if sub.Exists() {
				return appendExampleValue(dst, name, sub, depth+1)
			}
		}
	}

	switch schemaType(schema) {
	case "object":
		return appendExampleObject(dst, schema, depth+1)
	case "array":
		dst = append(dst, '[')
		dst = appendExampleValue(dst, singular(name), schema.Get("items"), depth+1)
		return append(dst, ']')
	case "integer":
		n := int64(1)
		if min := schema.Get("minimum"); min.Type == gjson.Number {
			n = min.Int()
		} else if max := schema.Get("maximum"); max.Type == gjson.Number && max.Int() < n {
			n = max.Int()
		}
		return strconv.AppendInt(dst, n, 10)
	case "number":
		f := 1.5
		if min := schema.Get("minimum"); min.Type == gjson.Number {
			f = min.Float()
		} else if max := schema.Get("maximum"); max.Type == gjson.Number && max.Float() < f {
			f = max.Float()
		}
		return appendFloat(dst, f)
	case "boolean":
		return append(dst, "true"...)
	case "null":
		return append(dst, "null"...)
	default:
		return appendString(dst, exampleString(name, schema.Get("format").String()))
	}
}

// appendExampleObject appends an example object for an object schema.
func appendExampleObject(dst []byte, schema gjson.Result, depth int) []byte {
	props := schema.Get("properties")
	required := schema.Get("required")
	dst = append(dst, '{')
	n := 0
	add := func(name string, sub gjson.Result) {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = appendString(dst, name)
		dst = append(dst, ':')
		dst = appendExampleValue(dst, name, sub, depth)
	}
	if required.IsArray() && len(required.Array()) > 0 {
		seen := make(map[string]bool)
		required.ForEach(func(_, r gjson.Result) bool {
			if name := r.String(); r.Type == gjson.String && !seen[name] {
				seen[name] = true
				add(name, props.Get(gjson.Escape(name)))
			}
			return true
		})
	} else if props.IsObject() {
		props.ForEach(func(k, sub gjson.Result) bool {
			add(k.String(), sub)
			return true
		})
	}
	return append(dst, '}')
}

// schemaType is the JSON-schema type of schema: the first non-null entry of a
// type list, or a type implied by properties/items, else "string".
func schemaType(schema gjson.Result) string {
	t := schema.Get("type")
	switch {
	case t.Type == gjson.String:
		return t.Str
	case t.IsArray():
		typ := ""
		t.ForEach(func(_, v gjson.Result) bool {
			if v.Type == gjson.String && v.Str != "null" {
				typ = v.Str
				return false
			}
			return true
		})
		if typ != "" {
			return typ
		}
	}
	if schema.Get("properties").Exists() {
		return "object"
	}
	if schema.Get("items").Exists() {
		return "array"
	}
	return "string"
}

// exampleString is a plausible string for a property with this name and
// JSON-schema format.
func exampleString(name, format string) string {
	switch format {
	case "date":
		return "2026-11-30"
	case "date-time":
		return "2026-11-30T09:00:00Z"
	case "time":
		return "09:00:00"
	case "email":
		return "ada@example.com"
	case "uri", "url":
		return "https://example.com/"
	case "uuid":
		return "6f1c2a52-3b8e-4d4f-9a0e-2d7c5b1e8f43"
	}
	n := strings.ToLower(name)
	switch {
	case n == "command" || n == "cmd" || strings.HasSuffix(n, "_command") || strings.HasSuffix(n, "_cmd"):
		return "ls -la"
	case n == "pattern" || n == "glob":
		return "**/*.go"
	case strings.Contains(n, "city"):
		return "Paris"
	case strings.Contains(n, "location"), strings.Contains(n, "address"), strings.Contains(n, "place"):
		return "Paris, France"
	case strings.Contains(n, "country"):
		return "France"
	case strings.Contains(n, "email"):
		return "ada@example.com"
	case strings.Contains(n, "url"), strings.Contains(n, "link"):
		return "https://example.com/"
	case strings.Contains(n, "date"):
		return "2026-11-30"
	case strings.Contains(n, "time"):
		return "09:00"
	case strings.Contains(n, "unit"):
		return "celsius"
	case strings.Contains(n, "lang"):
		return "en"
	case strings.Contains(n, "path"), strings.Contains(n, "file"):
		return "report.txt" // relative: agents keep the model inside their work folder
	case strings.Contains(n, "query"), strings.Contains(n, "search"), n == "q":
		return "weather in Paris"
	case strings.Contains(n, "name"):
		return "Ada Lovelace"
	case strings.HasSuffix(n, "id"):
		return "item-42"
	case strings.Contains(n, "message"), strings.Contains(n, "text"), strings.Contains(n, "content"), strings.Contains(n, "body"):
		return "Hello from the simulator."
	}
	return "example"
}

// singular turns a plural property name into the name of one element
// ("cities" → "city", "tags" → "tag"), so array items get fitting examples.
func singular(name string) string {
	if strings.HasSuffix(name, "ies") {
		return name[:len(name)-3] + "y"
	}
	return strings.TrimSuffix(name, "s")
}

// splitArguments cuts JSON arguments into the pieces a tool call streams, one
// token each: a word (letters and digits, with the spaces before it) or any
// other single character. The pieces concatenate back to args.
func splitArguments(args string) []string {
	pieces := make([]string, 0, len(args)/2+1)
	for i := 0; i < len(args); {
		j := i
		for j < len(args) && args[j] == ' ' {
			j++
		}
		k := j
		for k < len(args) {
			r, size := utf8.DecodeRuneInString(args[k:])
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
				break
			}
			k += size
		}
		if k == j { // no word: one character (spaces included)
			_, size := utf8.DecodeRuneInString(args[j:])
			if j == len(args) {
				size = 0
			}
			k = j + size
		}
		pieces = append(pieces, args[i:k])
		i = k
	}
	return pieces
}
