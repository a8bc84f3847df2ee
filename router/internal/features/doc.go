// Package features reads what the policy and the classifier see of a
// request from its parsed routing fields (wire.Info): the text the
// classifier judges (system prompt, last user turn, tool names), the
// opening of a conversation that a session is decided on, and the turn (a
// new instruction or a tool result, and the steps since the user last
// spoke). Pure functions; it imports classifier and router/internal/wire.
package features
