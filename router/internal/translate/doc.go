// Package translate turns one API's shapes into another's, as pure
// functions of bytes: a Responses or Messages request into the chat
// completions request vLLM continues a cut answer on (tochat.go,
// tochat_responses.go, tochat_messages.go), and the function calls a
// replica makes for Responses custom tools back into custom tool calls
// (customcodec.go). Nothing here holds state or does I/O. It imports
// router/internal/wire and router/internal/sse, no other Switchyard
// package.
package translate
