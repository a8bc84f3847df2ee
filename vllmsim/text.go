package vllmsim

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// passage is the text the simulator "generates", cyclically, one token per
// word. Each token carries its leading space, as BPE tokens do.
const passage = "The morning light settled softly over the quiet harbor. " +
	"Fishing boats rocked gently while gulls circled overhead. " +
	"A warm breeze carried the scent of salt and fresh bread from the village. " +
	"Children laughed along the old stone pier as a painter mixed colors by the water. " +
	"Every small moment felt calm, bright, and full of simple promise. " +
	"Later the tide returned, and the lanterns began to glow one by one."

var (
	// passageTokens are the words of passage, each with a leading space.
	passageTokens []string
	// sentenceStarts are the indexes in passageTokens that begin a sentence;
	// a completion starts at one of them.
	sentenceStarts []int
)

// alternativeTokens fill top_logprobs next to a generated word. There are
// more than the 20 top_logprobs vLLM allows, so 19 alternatives remain after
// skipping the generated token itself.
var alternativeTokens = []string{
	" the", " a", " and", " of", " to", " in", " with", " gentle", " bright", " small",
	" over", " warm", " old", " calm", " quiet", " soft", " light", " water", " sea", " sky",
	" day", " slowly",
}

func init() {
	for i, w := range strings.Fields(passage) {
		passageTokens = append(passageTokens, " "+w)
		if i == 0 || strings.HasSuffix(passageTokens[i-1], ".") {
			sentenceStarts = append(sentenceStarts, i)
		}
	}
}

// textToken is token number step of a text completion that starts at passage
// token start. The first token of a completion has no leading space.
func textToken(start, step int) string {
	t := passageTokens[(start+step)%len(passageTokens)]
	if step == 0 {
		return t[1:]
	}
	return t
}

// textLogprob is the deterministic logprob of token step of a completion that
// starts at passage token start, between -0.02 and -1.5.
func textLogprob(start, step int) float64 {
	k := (start*7 + step*13) % 89
	return -round4(0.02 + float64(k)/60)
}

// alternative is the i-th alternative token to tok (i from 0), and its
// logprob given tok's logprob lp: each is less likely than the one before.
func alternative(tok string, lp float64, i int) (string, float64) {
	alp := round4(lp - 0.9 - 0.6*float64(i))
	for _, a := range alternativeTokens {
		if a == tok {
			continue
		}
		if i == 0 {
			return a, alp
		}
		i--
	}
	return alternativeTokens[0], alp // only for i beyond the list, which callers never ask
}

// round4 rounds x to four decimals, so logprobs print short.
func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// findPrefix finds the passage position a text answer that begins with
// prefix started at, and how many of its tokens prefix holds: prefix must
// be exactly the first k tokens of an answer this simulator writes.
func findPrefix(prefix string) (start, k int, ok bool) {
	if prefix == "" {
		return 0, 0, false
	}
	for _, st := range sentenceStarts {
		rest := prefix
		for k := 0; ; k++ {
			tok := textToken(st, k)
			if !strings.HasPrefix(rest, tok) {
				break
			}
			rest = rest[len(tok):]
			if rest == "" {
				return st, k + 1, true
			}
			if k > len(passageTokens)*4 {
				break
			}
		}
	}
	return 0, 0, false
}

// The natural length of an answer (Profile.NaturalLengths) is log-normal:
// median naturalMedian tokens and shape naturalSigma, so half the answers
// are within about 100 to 370 tokens, one in ten is longer than about
// 640, and one in a hundred longer than about 1,600; an answer the first
// user message asks to be long (a word starting "long", "detailed",
// "essay", "thorough", "comprehensive" or "in depth") has median
// naturalLongMedian. Lengths are at least naturalMin and at most
// naturalMax tokens. These are this package's assumptions of a chat
// model's answers, not measured figures.
const (
	naturalMedian     = 200
	naturalLongMedian = 1500
	naturalSigma      = 0.9
	naturalMin        = 8
	naturalMax        = 16384
)

// longMarkers are the words asking for a long answer.
var longMarkers = []string{"long", "detailed", "essay", "thorough", "comprehensive", "in depth"}

// NaturalLength is the natural length in tokens of the answer keyed by
// key, under seed; long: the user asked for a long answer.
func NaturalLength(seed, key uint64, long bool) int {
	r := rand.New(rand.NewPCG(seed, key))
	median := float64(naturalMedian)
	if long {
		median = naturalLongMedian
	}
	n := int(math.Round(median * math.Exp(naturalSigma*r.NormFloat64())))
	return min(max(n, naturalMin), naturalMax)
}

// asksLong reports whether text asks for a long answer (a longMarkers word
// at the start of a word).
func asksLong(text string) bool { return containsWord(text, longMarkers) }

// answerLength is the own length of a Responses or Messages answer after
// the conversation h: DefaultMaxTokens, or with NaturalLengths its
// natural length.
func (s *Server) answerLength(h history) int {
	if !s.profile.NaturalLengths {
		return s.defaultMaxTokens
	}
	return s.naturalLength(h, h.turns)
}

// naturalLength is the natural length of the answer that follows turns
// assistant answers in the conversation h. It is keyed by the first user
// message's text without its white space and by turns, which read the
// same on every API and after the gateway translates a Responses or
// Messages conversation to chat to continue it; a long answer is one
// that first message asks for.
func (s *Server) naturalLength(h history, turns int) int {
	key := fnvAdd(fnvOffset, strings.Join(strings.Fields(h.firstUser), ""))
	key = fnvAdd(key, strconv.Itoa(turns))
	return NaturalLength(s.profile.LengthSeed, key, asksLong(ownWords(h.firstUser)))
}

// userText is a message content's text: the string, or its parts' text
// fields one after another.
func userText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	var b strings.Builder
	c.ForEach(func(_, part gjson.Result) bool {
		if t := part.Get("text"); t.Type == gjson.String {
			b.WriteString(t.Str)
		}
		return true
	})
	return b.String()
}
