package vllmsim_test

import (
	"context"
	"errors"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/switchyard/switchyard/vllmsim"
)

// TestOpenAIClient drives the simulator with the official OpenAI Go client,
// the way gateway users will.
func TestOpenAIClient(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 8})
	client := openai.NewClient(
		option.WithBaseURL(ts.URL+"/v1/"),
		option.WithAPIKey("unused"),
		option.WithHTTPClient(ts.Client()),
		option.WithMaxRetries(0),
	)
	ctx := context.Background()
	chat := openai.ChatCompletionNewParams{
		Model:    testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Describe the harbor.")},
	}

	t.Run("chat", func(t *testing.T) {
		resp, err := client.Chat.Completions.New(ctx, chat)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" || resp.Choices[0].FinishReason != "stop" || resp.Usage.CompletionTokens != 8 {
			t.Errorf("response %s", resp.RawJSON())
		}
	})

	t.Run("stream", func(t *testing.T) {
		params := chat
		params.StreamOptions.IncludeUsage = openai.Bool(true)
		params.Logprobs = openai.Bool(true)
		params.TopLogprobs = openai.Int(2)
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content == "" || acc.Usage.CompletionTokens != 8 {
			t.Fatalf("accumulated %+v", acc.ChatCompletion)
		}
		if n := len(acc.Choices[0].Logprobs.Content); n != 8 {
			t.Errorf("%d logprobs entries, want 8", n)
		}
	})

	t.Run("tool call stream", func(t *testing.T) {
		params := chat
		params.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather",
			Parameters: openai.FunctionParameters{
				"type":       "object",
				"properties": map[string]any{"city": map[string]any{"type": "string"}},
				"required":   []string{"city"},
			},
		})}
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		var finished []openai.FinishedChatCompletionToolCall
		for stream.Next() {
			acc.AddChunk(stream.Current())
			if tc, ok := acc.JustFinishedToolCall(); ok {
				finished = append(finished, tc)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(finished) != 1 || finished[0].Name != "get_weather" || finished[0].Arguments != `{"city":"Paris"}` {
			t.Errorf("finished tool calls %+v", finished)
		}
		if acc.Choices[0].FinishReason != "tool_calls" {
			t.Errorf("finish_reason %q", acc.Choices[0].FinishReason)
		}
	})

	t.Run("guided choice with logprobs", func(t *testing.T) {
		params := chat
		params.Logprobs = openai.Bool(true)
		params.TopLogprobs = openai.Int(5)
		resp, err := client.Chat.Completions.New(ctx, params,
			option.WithJSONSet("structured_outputs", map[string]any{"choice": []string{"simple", "complex"}}))
		if err != nil {
			t.Fatal(err)
		}
		c := resp.Choices[0]
		if c.Message.Content != "simple" || len(c.Logprobs.Content) != 1 || len(c.Logprobs.Content[0].TopLogprobs) != 2 {
			t.Errorf("response %s", resp.RawJSON())
		}
	})

	t.Run("legacy completion", func(t *testing.T) {
		resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(testModel),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			MaxTokens: openai.Int(3),
			Logprobs:  openai.Int(1),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 || resp.Choices[0].FinishReason != "length" || len(resp.Choices[0].Logprobs.Tokens) != 3 {
			t.Errorf("response %s", resp.RawJSON())
		}
	})

	t.Run("not found", func(t *testing.T) {
		params := chat
		params.Model = "nope"
		_, err := client.Chat.Completions.New(ctx, params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
			t.Fatalf("error %v: want a 404 API error", err)
		}
		if apiErr.Message != "The model `nope` does not exist." || apiErr.Type != "NotFoundError" {
			t.Errorf("error message %q type %q", apiErr.Message, apiErr.Type)
		}
	})

	if st := sim.Stats(); st.Completed != 5 || st.Failed != 1 {
		t.Errorf("stats %+v", st)
	}
}
