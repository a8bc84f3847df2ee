package router_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/vllmsim"
)

// typedResumeProfile answers with 8 tokens of reasoning, then content.
var typedResumeProfile = vllmsim.Profile{Model: "m", DefaultMaxTokens: 24, ReasoningTokens: 8}

// TestResumeResponsesStream: a streamed Responses answer whose replica dies
// is continued on another replica (through its chat completions endpoint,
// the one vLLM continues a partial answer on) and the official SDK sees
// one stream: one response.created, one response.completed, sequence
// numbers without a gap, output indexes continuing, the reasoning and text
// of the uncut answer, usage for the whole answer, and the gateway's ids.
// The cut falls while reasoning, right after the reasoning item, and while
// answering.
func TestResumeResponsesStream(t *testing.T) {
	ask := responses.ResponseNewParams{Model: "auto", Instructions: openai.String("Be brief."),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Describe the harbor.")}}
	ref := startReplica(t, typedResumeProfile)
	refc := sdk(oneReplicaGateway(t, ref.Srv.URL, "", ""))
	want, err := refc.Responses.New(context.Background(), ask)
	if err != nil {
		t.Fatal(err)
	}
	for _, cutAfter := range []int{8, 15, 20} {
		t.Run(fmt.Sprint("cut after ", cutAfter), func(t *testing.T) {
			gw, a, b := resumeGatewayWith(t, typedResumeProfile, cutAfter, "")
			c := sdk(gw)
			stream := c.Responses.NewStreaming(context.Background(), ask)
			var text, reasoning string
			var completed responses.Response
			created, completes := 0, 0
			seq := int64(-1)
			for stream.Next() {
				ev := stream.Current()
				if ev.SequenceNumber != seq+1 {
					t.Errorf("sequence_number %d after %d (%s)", ev.SequenceNumber, seq, ev.Type)
				}
				seq = ev.SequenceNumber
				switch ev.Type {
				case "response.created":
					created++
				case "response.output_text.delta":
					text += ev.Delta
				case "response.reasoning_text.delta":
					reasoning += ev.Delta
				case "response.completed":
					completes++
					completed = ev.AsResponseCompleted().Response
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("the SDK saw an error: %v", err)
			}
			if created != 1 || completes != 1 {
				t.Errorf("%d response.created, %d response.completed; want one each", created, completes)
			}
			if text != want.OutputText() || completed.OutputText() != want.OutputText() {
				t.Errorf("text %q, completed %q\nwant the uncut answer %q", text, completed.OutputText(), want.OutputText())
			}
			if wr := gjson.Get(want.RawJSON(), "output.0.content.0.text").Str; reasoning != wr {
				t.Errorf("reasoning %q, want %q", reasoning, wr)
			}
			if n := len(completed.Output); n != 2 || completed.Output[0].Type != "reasoning" || completed.Output[1].Type != "message" {
				t.Errorf("completed output %s; want the reasoning item, then the message", gjson.Get(completed.RawJSON(), "output").Raw)
			}
			if completed.Usage.OutputTokens != want.Usage.OutputTokens || !strings.HasPrefix(completed.ID, "resp_sy") || completed.Status != "completed" {
				t.Errorf("completed: usage %+v (want %d output tokens), id %q, status %q", completed.Usage, want.Usage.OutputTokens, completed.ID, completed.Status)
			}
			cont := b.LastBody()
			if a.Count() != 1 || b.Count() != 1 || !gjson.GetBytes(cont, "continue_final_message").Bool() || gjson.GetBytes(cont, "messages.0.role").Str != "system" {
				t.Errorf("a got %d requests, b %d; continuation %s", a.Count(), b.Count(), cont)
			}
			// Cut once the reasoning item was done: the partial message
			// closes the thinking block, so the model answers.
			if partial := gjson.GetBytes(cont, "messages.@reverse.0.content").Str; cutAfter >= 15 && !strings.Contains(partial, "\n</think>\n\n") {
				t.Errorf("partial message %q leaves the reasoning open", partial)
			}
			polltest.Eventually(t, 5*time.Second, "the request to be counted", func() bool {
				return gw.MetricValue(t, "switchyard_stream_resumes_total", map[string]string{"result": "resumed"}) == 1 &&
					gw.MetricValue(t, "switchyard_requests_total", map[string]string{"code": "200"}) == 1
			})
		})
	}
}

// TestResumeMessagesStream: the same for the Anthropic Messages API, with
// the official SDK's accumulator, which refuses a malformed event order:
// one message_start, one message_stop, block indexes continuing, the
// thinking and text of the uncut answer, and usage for the whole answer.
func TestResumeMessagesStream(t *testing.T) {
	// max_tokens far above the answer, as agents ask.
	params := anthropic.MessageNewParams{Model: "auto", MaxTokens: 4096,
		System:   []anthropic.TextBlockParam{{Text: "Be brief."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Describe the harbor."))}}
	ref := startReplica(t, typedResumeProfile)
	refc := anthropicClient(oneReplicaGateway(t, ref.Srv.URL, "", ""))
	want, err := refc.Messages.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	for _, cutAfter := range []int{6, 12, 16} {
		t.Run(fmt.Sprint("cut after ", cutAfter), func(t *testing.T) {
			gw, _, b := resumeGatewayWith(t, typedResumeProfile, cutAfter, "")
			c := anthropicClient(gw)
			stream := c.Messages.NewStreaming(context.Background(), params)
			var acc anthropic.Message
			starts, stops := 0, 0
			for stream.Next() {
				ev := stream.Current()
				switch ev.Type {
				case "message_start":
					starts++
				case "message_stop":
					stops++
				}
				if err := acc.Accumulate(ev); err != nil {
					t.Fatalf("accumulate %s: %v", ev.RawJSON(), err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("the SDK saw an error: %v", err)
			}
			if starts != 1 || stops != 1 {
				t.Errorf("%d message_start, %d message_stop; want one each", starts, stops)
			}
			if len(acc.Content) != 2 || acc.Content[0].Thinking != want.Content[0].Thinking || acc.Content[1].Text != want.Content[1].Text {
				t.Errorf("accumulated %s\nwant the uncut answer %s", gjson.Get(acc.RawJSON(), "content").Raw, gjson.Get(want.RawJSON(), "content").Raw)
			}
			if acc.Usage.OutputTokens != want.Usage.OutputTokens || acc.Usage.InputTokens != want.Usage.InputTokens || acc.StopReason != want.StopReason {
				t.Errorf("usage %d in, %d out, stop %q; want %d in, %d out, %q", acc.Usage.InputTokens, acc.Usage.OutputTokens, acc.StopReason, want.Usage.InputTokens, want.Usage.OutputTokens, want.StopReason)
			}
			if p := b.LastBody(); !gjson.GetBytes(p, "continue_final_message").Bool() || gjson.GetBytes(p, "messages.0.content").Str != "Be brief." {
				t.Errorf("continuation %s", p)
			}
			// Cut once the thinking block had stopped: the partial message
			// closes it.
			if partial := gjson.GetBytes(b.LastBody(), "messages.@reverse.0.content").Str; cutAfter >= 12 && !strings.Contains(partial, "\n</think>\n\n") {
				t.Errorf("partial message %q leaves the thinking open", partial)
			}
		})
	}
}

// TestResumeResponsesIncompleteEndsAsTheReplica: a streamed Responses
// answer that reaches max_output_tokens ends, uncut, with the replica's
// terminal event (vLLM sends response.completed with status "incomplete").
// Cut and resumed, it must end with the same event name and status: the
// demo's reader, like any client that waits for the event it saw before,
// took a resumed response.incomplete for a stream that never ended.
func TestResumeResponsesIncompleteEndsAsTheReplica(t *testing.T) {
	ask := responses.ResponseNewParams{Model: "auto", MaxOutputTokens: openai.Int(18),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Describe the harbor.")}}
	terminal := func(c openai.Client) (typ, status string) {
		stream := c.Responses.NewStreaming(context.Background(), ask)
		for stream.Next() {
			switch ev := stream.Current(); ev.Type {
			case "response.completed", "response.incomplete", "response.failed":
				typ, status = ev.Type, string(ev.Response.Status)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("the SDK saw an error: %v", err)
		}
		return typ, status
	}
	ref := startReplica(t, typedResumeProfile)
	wantTyp, wantStatus := terminal(sdk(oneReplicaGateway(t, ref.Srv.URL, "", "")))
	if wantStatus != "incomplete" {
		t.Fatalf("the uncut answer ended %s %q; the test needs one cut by max_output_tokens", wantTyp, wantStatus)
	}
	gw, _, b := resumeGatewayWith(t, typedResumeProfile, 12, "")
	typ, status := terminal(sdk(gw))
	if typ != wantTyp || status != wantStatus {
		t.Errorf("the resumed stream ended %s %q; the uncut one %s %q", typ, status, wantTyp, wantStatus)
	}
	if b.Count() != 1 {
		t.Errorf("the second replica got %d requests, want the continuation", b.Count())
	}
}
