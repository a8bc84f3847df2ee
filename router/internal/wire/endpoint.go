package wire

// endpoint is the API a request came in on.
type Endpoint int

const (
	Chat Endpoint = iota
	Completions
	// Responses is OpenAI's Responses API (POST /v1/responses).
	Responses
	// Messages is Anthropic's Messages API (POST /v1/messages).
	Messages
	// The endpoints below are passed to a pool named by the model, with
	// no policy and no classifier.
	CountTokens // POST /v1/messages/count_tokens
	Embeddings  // POST /v1/embeddings
	Tokenize    // POST /tokenize (vLLM)
	Detokenize  // POST /detokenize (vLLM)
)

// endpointSpec is what the gateway does differently for one API. Every
// rule that depends on the API a request came in on reads it here.
type Spec struct {
	// path is the endpoint's path, on the gateway and on vLLM.
	path string
	// operation is its gen_ai.operation.name.
	operation string
	// generates: the endpoint generates text; the policy routes it, and
	// its stream carries tokens and usage.
	generates bool
	// anthropic: errors and stream events take Anthropic's shapes.
	anthropic bool
	// typed: stream events name their type and the stream ends with a
	// terminal event of its own, not [DONE] (Responses, Messages).
	Typed bool
	// asksUsage: a stream's usage is asked for on the client's behalf
	// (stream_options.include_usage) and removed again when the client
	// did not ask for it.
	AsksUsage bool
	// missingModel404: a replica's 404 means the server lacks the pool's
	// model (it is retried elsewhere and marks the replica misconfigured).
	// Elsewhere a 404 may be an answer: a stored response that is not
	// there, or an endpoint this vLLM version lacks.
	MissingModel404 bool
}

var endpoints = [...]Spec{
	Chat:        {path: "/v1/chat/completions", operation: "chat", generates: true, AsksUsage: true, MissingModel404: true},
	Completions: {path: "/v1/completions", operation: "text_completion", generates: true, AsksUsage: true, MissingModel404: true},
	Responses:   {path: "/v1/responses", operation: "chat", generates: true, Typed: true},
	Messages:    {path: "/v1/messages", operation: "chat", generates: true, anthropic: true, Typed: true},
	CountTokens: {path: "/v1/messages/count_tokens", operation: "chat", anthropic: true},
	Embeddings:  {path: "/v1/embeddings", operation: "chat"},
	Tokenize:    {path: "/tokenize", operation: "chat"},
	Detokenize:  {path: "/detokenize", operation: "chat"},
}

func (e Endpoint) Spec() *Spec { return &endpoints[e] }

func (e Endpoint) Path() string { return endpoints[e].path }

// anthropic reports whether the endpoint speaks Anthropic's API.
func (e Endpoint) Anthropic() bool { return endpoints[e].anthropic }

// generates reports whether the endpoint generates text.
func (e Endpoint) Generates() bool { return endpoints[e].generates }

// operation is the request's gen_ai.operation.name.
func (e Endpoint) Operation() string { return endpoints[e].operation }
