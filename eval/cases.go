package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/switchyard/switchyard/router"
)

// Case is one labelled request of a set.
type Case struct {
	// Line is the case's line in its file, from 1.
	Line  int
	Label string
	API   router.API
	req   *router.EvalRequest
}

// LineError is a problem with one line of a set.
type LineError struct {
	File string
	Line int
	Msg  string
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// Errors are every bad line of a set, in line order.
type Errors []*LineError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// line is a case as written.
type line struct {
	Label   *string         `json:"label"`
	Request json.RawMessage `json:"request"`
	API     *string         `json:"api"`
}

// Read reads the labelled set data, named file in errors: one JSON object
// a line, {"label": LABEL, "request": BODY}, with an optional "api"
// (chat, completions, responses or messages) naming the API of a body its
// fields do not tell apart. Blank lines are skipped. Each body is read as
// g reads a request of its API, its model resolved by g's models. Every
// bad line is reported, as Errors; a set with a bad line yields no cases.
func Read(g *router.Gateway, labels []string, file string, data []byte) ([]Case, error) {
	var cases []Case
	var errs Errors
	bad := func(n int, format string, args ...any) {
		errs = append(errs, &LineError{File: file, Line: n, Msg: fmt.Sprintf(format, args...)})
	}
	for i, text := range bytes.Split(data, []byte("\n")) {
		n := i + 1
		text = bytes.TrimSpace(text)
		if len(text) == 0 {
			continue
		}
		var l line
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			bad(n, "%s", jsonError(err))
			continue
		}
		if dec.More() {
			bad(n, "more than one JSON value on the line")
			continue
		}
		switch {
		case l.Label == nil:
			bad(n, `missing "label"`)
			continue
		case !slices.Contains(labels, *l.Label):
			bad(n, "label %q is not a class of the classifier (labels: %s)", *l.Label, strings.Join(labels, ", "))
			continue
		case len(l.Request) == 0 || string(l.Request) == "null":
			bad(n, `missing "request"`)
			continue
		}
		api := router.DetectAPI(l.Request)
		if l.API != nil {
			api = router.API(*l.API)
		}
		req, err := g.PrepareEval(api, l.Request)
		if err != nil {
			bad(n, "request (%s API): %v", api, err)
			continue
		}
		cases = append(cases, Case{Line: n, Label: *l.Label, API: api, req: req})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if len(cases) == 0 {
		return nil, Errors{{File: file, Line: 1, Msg: "no cases: want one JSON object a line"}}
	}
	return cases, nil
}

// jsonError says what is wrong with a line that does not decode.
func jsonError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("not valid JSON at byte %d: %v", syn.Offset, err)
	case errors.As(err, &typ) && typ.Field == "":
		return "want a JSON object with label and request, got a JSON " + typ.Value
	case errors.As(err, &typ):
		return fmt.Sprintf("%q must be a string, not a JSON %s", typ.Field, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown key " + strings.TrimPrefix(err.Error(), "json: unknown field ") + " (known: label, request, api)"
	}
	return "not valid JSON: " + err.Error()
}
