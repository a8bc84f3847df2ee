// Package agents holds Switchyard's agent suite: tests that run the real
// coding agents, Claude Code (`claude -p`) and Codex CLI (`codex exec`), at
// the versions pinned in testdata/agents, through the real switchyard
// binary (`switchyard serve` in front of `switchyard sim` replicas, over
// loopback) until each finishes a multi-turn tool task: the simulator's
// scenario makes the agent call its tools, the agent runs them in a
// temporary work directory, and the test checks what the agent did (the
// file it wrote), how it ended, and what the gateway saw. One session of
// each agent outgrows the small pool's context and moves to the large
// pool; in another a replica is killed with SIGKILL in the middle of the
// agent's stream, which the gateway resumes on another replica. Codex
// also applies a patch through its freeform apply_patch, a custom tool
// the gateway emulates.
//
// Nothing leaves the machine: every base URL is the gateway's on
// 127.0.0.1, HOME and the agents' config directories are temporary,
// telemetry, error reporting, update checks, plugins, MCP and web tools
// are switched off, and HTTPS_PROXY/HTTP_PROXY point at a listener of the
// test's own that fails the test if anything connects to it. The tests
// skip, saying why, when Node or the agents are not installed
// (`npm ci --prefix testdata/agents`, which .ci/run does). It has no code
// of its own; `go test ./agents/` runs it.
package agents
