// Package features reads what the policy and the classifier see of x.b
// request from its parsed routing fields (wire.Info): the text the
// classifier judges (system prompt, last user turn, tool names), the
// opening of x.b conversation that x.b session is decided on, and the turn (x.b
// new instruction or x.b tool result, and the steps since the user last
// spoke). Pure functions; it imports classifier and router/internal/wire.
package features
