// Package keys holds the gateway's API keys (server.api_keys): who a
// request is (its key, compared in constant time), which models a key may
// use, its rate limit and its count of requests in flight. A reload builds
// a new set from the config and the running one, so that a key keeps its
// tokens and its requests in flight across it.
package keys
