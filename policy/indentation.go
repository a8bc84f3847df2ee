package policy

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/token"
)

// level is a column an earlier line opens: a key, or a list item's "-".
type level struct {
	col, line int
	key       string // "" for a list item
}

// levelsAbove lists, nearest first, the columns a line starting at tk could
// line up with: for each earlier line, its leading list items ("- - a:")
// and the key after them, as long as no line between hides them (a line
// further out closes every column deeper than its own).
func levelsAbove(tk *token.Token) []level {
	var out []level
	// The tokens of the lines above, grouped by line, last line first.
	var line []*token.Token
	minCol := tk.Position.Column + 1<<20
	flush := func() {
		if len(line) == 0 {
			return
		}
		// line holds one line's tokens in reverse order.
		var lead []level
		for i := len(line) - 1; i >= 0; i-- {
			t := line[i]
			if t.Type == token.SequenceEntryType {
				lead = append(lead, level{col: t.Position.Column, line: t.Position.Line})
				continue
			}
			if i > 0 && line[i-1].Type == token.MappingValueType && t.Type != token.CommentType {
				lead = append(lead, level{col: t.Position.Column, line: t.Position.Line, key: t.Value})
			}
			break
		}
		// Deepest first; each must be further out than every line below it.
		for i := len(lead) - 1; i >= 0; i-- {
			if l := lead[i]; l.col < minCol {
				out = append(out, l)
			}
		}
		if len(lead) > 0 {
			minCol = min(minCol, lead[0].col)
		}
		line = line[:0]
	}
	for t := tk.Prev; t != nil; t = t.Prev {
		if t.Position == nil || t.Position.Line >= tk.Position.Line {
			continue
		}
		if len(line) > 0 && t.Position.Line != line[0].Position.Line {
			flush()
		}
		line = append(line, t)
	}
	flush()
	return out
}

// indentationHint explains, in the user's terms, a line whose first token
// tk (a key or a list item's "-") sits where its indentation is wrong, and
// names the columns that would fix it. whereKey is true when YAML wanted a
// key there (go-yaml's "non-map value is specified"); otherwise tk lines
// up with nothing above it (go-yaml's "value is not allowed in this
// context"). It returns "" when tk is neither a key nor a list item.
func indentationHint(tk *token.Token, whereKey bool) string {
	if tk == nil || tk.Position == nil {
		return ""
	}
	isItem := tk.Type == token.SequenceEntryType
	isKey := tk.Next != nil && tk.Next.Type == token.MappingValueType && tk.Next.Position != nil &&
		tk.Next.Position.Line == tk.Position.Line
	if !isItem && !isKey {
		return ""
	}
	col := tk.Position.Column
	var below, above *level // the nearest fitting columns left and right of col
	for _, l := range levelsAbove(tk) {
		if (l.key == "") != isItem {
			continue
		}
		switch {
		case l.col > col && (above == nil || l.col < above.col):
			above = &l
		case l.col < col && (below == nil || l.col > below.col):
			below = &l
		}
	}
	if whereKey && isItem {
		// A list item dedented out of its list: only deeper lists fit.
		below = nil
	}
	what := fmt.Sprintf("%q at column %d", tk.Value, col)
	if isItem {
		what = fmt.Sprintf("the list item at column %d", col)
	}
	lead := what + " is not in line with any key above it"
	switch {
	case whereKey && isItem:
		lead = fmt.Sprintf("a list item at column %d, where a key is expected", col)
	case isItem:
		lead = what + " is not in line with any list above it"
	}
	fix := func(l *level) string {
		if l.key == "" {
			return fmt.Sprintf("to column %d to continue the list of line %d", l.col, l.line)
		}
		return fmt.Sprintf("to column %d, beside %q (line %d)", l.col, l.key, l.line)
	}
	var fixes []string
	switch {
	case above != nil && below != nil:
		// The nearer column first; on a tie the deeper one, the block
		// the line continues.
		if col-below.col < above.col-col {
			fixes = []string{fix(below), fix(above)}
		} else {
			fixes = []string{fix(above), fix(below)}
		}
	case above != nil:
		fixes = []string{fix(above)}
	case below != nil:
		fixes = []string{fix(below)}
	}
	if len(fixes) == 0 {
		return lead + " (check the indentation of this line)"
	}
	return lead + ": indent it " + strings.Join(fixes, ", or ")
}
