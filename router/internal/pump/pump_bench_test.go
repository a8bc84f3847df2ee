package pump

import (
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// benchStreams are vLLM-shaped streams of 64 content deltas: what the
// pump relays on the normal path.
var benchStreams = func() map[string]string {
	var chat, resp, msgs strings.Builder
	resp.WriteString("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"output\":[],\"status\":\"in_progress\"}}\n\n")
	msgs.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := range 64 {
		n := strconv.Itoa(i + 1)
		chat.WriteString("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n")
		resp.WriteString("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":" + n + ",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\" word\",\"logprobs\":[]}\n\n")
		msgs.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" word\"}}\n\n")
	}
	chat.WriteString("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	resp.WriteString("event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":65,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"output\":[],\"status\":\"completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":64,\"total_tokens\":69}}}\n\n")
	msgs.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":64}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	// What vLLM sends once the gateway asks for usage on a client's
	// behalf: "usage":null in every chunk, removed by the pump.
	injected := strings.ReplaceAll(chat.String(), `"finish_reason":null}]}`, `"finish_reason":null}],"usage":null}`)
	return map[string]string{"chat": chat.String(), "chat-injected": injected, "responses": resp.String(), "messages": msgs.String()}
}()

// BenchmarkPump relays a 64-delta stream of each API to a discarding
// client: its allocations per stream are the pump's own per-event cost.
func BenchmarkPump(b *testing.B) {
	for _, c := range []struct {
		name     string
		ep       wire.Endpoint
		injected bool
	}{{"chat", wire.Chat, false}, {"chat-injected", wire.Chat, true}, {"responses", wire.Responses, false}, {"messages", wire.Messages, false}} {
		stream := benchStreams[c.name]
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			r := strings.NewReader(stream)
			for b.Loop() {
				r.Reset(stream)
				p := Pump{W: io.Discard, API: c.ep, Injected: c.injected}
				if err := p.Run(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
