// Package eval measures a classifier and a policy on a labelled set of
// requests (switchyard eval): it replays every request through the
// gateway's own classification and routing path (router.Gateway.Evaluate:
// the configured classifier, really called, and the policy) and reports
// accuracy, the confusion matrix, per-label precision and recall,
// calibration, the split the policy would produce, a threshold sweep of
// the class that belongs on the large pool, and the throughput the split
// projects against a large-only cluster (package capacity).
//
// A set is JSON Lines, one case a line:
//
//	{"label": "complex", "request": {"model": "auto", "messages": [...]}}
//
// The request is a chat, Responses, Messages or completions body, told
// apart by its fields (router.DetectAPI) or named by an optional "api".
package eval
