// Package outcomes reads how an answered agent turn went from what the
// agent sent next, without a judge model: the next turn of the same
// session carries a failed tool result, repeats an identical tool call,
// asks the same instruction again, or moved the session up. It keeps each
// session's last answered turn (its pool and route), bounded, and counts
// one outcome per answered turn that a next turn follows. It imports
// nothing of Switchyard.
package outcomes
