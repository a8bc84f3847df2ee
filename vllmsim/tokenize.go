package vllmsim

import (
	"io"
	"net/http"
	"strconv"

	"github.com/tidwall/gjson"
)

// maxTokenizeBody bounds a /tokenize request.
const maxTokenizeBody = 64 << 20

// serveTokenize answers POST /tokenize as vLLM does: a chat request
// (messages, and the tools its chat template renders) or a completion
// request (prompt) comes back as {"count", "max_model_len", "tokens",
// "token_strs"}. The count is the simulator's tokenizer over what chat and
// completions count as the prompt, and nothing is refused for its length
// (vLLM's tokenize sets no limit).
func (s *Server) serveTokenize(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTokenizeBody))
	if err != nil {
		writeError(w, badRequest("could not read the request body"))
		return
	}
	root, e := s.parseRoot(body)
	if e != nil {
		writeError(w, e)
		return
	}
	chars := 0
	switch msgs, prompt := root.Get("messages"), root.Get("prompt"); {
	case msgs.IsArray():
		msgs.ForEach(func(_, m gjson.Result) bool {
			_, n, _ := contentText(m.Get("content"), false)
			chars += n
			m.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
				chars += len(tc.Get("function.name").Str) + len(tc.Get("function.arguments").Str)
				return true
			})
			return true
		})
		tools, e := parseTools(root)
		if e != nil {
			writeError(w, e)
			return
		}
		chars += tools.chars
	case prompt.Type == gjson.String:
		chars = len(prompt.Str)
	default:
		writeError(w, badRequest("messages or prompt: field required"))
		return
	}
	count := estimateTokens(chars)
	b := append(make([]byte, 0, 64+count*6), `{"count":`...)
	b = strconv.AppendInt(b, int64(count), 10)
	b = append(b, `,"max_model_len":`...)
	b = strconv.AppendInt(b, int64(s.profile.MaxModelLen), 10)
	b = append(b, `,"tokens":[`...)
	for i := range count {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(100+i%30000), 10)
	}
	b = append(b, `],"token_strs":null}`...)
	writeJSON(w, http.StatusOK, b)
}
