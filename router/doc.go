// Package router is the gateway: it joins policy, classifier and pools into
// the OpenAI-compatible HTTP surface (README.md: endpoints).
//
// For each request it authenticates, reads the few routing fields from the
// body bytes, asks the policy for a route (classifying lazily), acquires a
// replica from the chosen pool, and proxies the body — with only `model`
// rewritten — streaming the answer back as it arrives. The running
// configuration is an immutable [Snapshot] behind an atomic pointer;
// reloads build a new one and swap it, and each request keeps the snapshot it
// started with.
package router
