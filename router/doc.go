// Package router is the gateway: it joins policy (the config),
// policy/routing (the routes' evaluation), classifier, pools and discovery
// into the OpenAI-compatible HTTP surface (README.md: endpoints).
//
// For each request it authenticates, reads the few routing fields from the
// body bytes, asks the policy for a route (classifying lazily), acquires a
// replica from the chosen pool, and proxies the body — with only `model`
// rewritten — streaming the answer back as it arrives. The running
// configuration is an immutable [Snapshot] behind an atomic pointer;
// reloads build a new one and swap it, and each request keeps the snapshot it
// started with.
//
// This package keeps the Gateway and the request path, in files named
// after their parts: gateway.go (the Gateway's state), snapshot.go (a
// running configuration), reload.go (New, Reload and Apply: building a
// snapshot and swapping it in), routes.go (the client route table),
// exchange.go (the state of one request, which the stage files read, and
// how it ended), handler.go and admit.go (serving a request, admission:
// key, body, deadline, rate limit), decide.go (the policy request,
// sessions, classification), forward.go (the chain of pools, placing a
// request on one), attempt.go (one attempt of a client request: deliver or
// relay its answer), send.go (one HTTP exchange with a replica), resume.go
// (a cut stream continued elsewhere); explain.go and eval.go answer what
// the request path would do. The jobs that need no Gateway live in
// packages under router/internal, none of which imports router: wire (the
// APIs' shapes), translate (one API's shapes into another's), sse (event
// framing), pump (the stream relay), resume (following a stream,
// translating a continuation), upstream (the executor, the phase clock,
// outbound headers, the Via loop guard), conns (connection bounds), keys
// (API keys: authentication, models, rate, requests in flight),
// discoveries (the pools' running discoveries across reloads), tokenize
// (whether a prompt fits a pool's context, and the /tokenize call's
// rules), shadow (a candidate policy on live traffic), features (what the
// policy and classifier read of a request), metrics (the gateway's
// Prometheus series), spans (trace attributes) and admin (the admin
// listener and status page, behind a View).
package router
