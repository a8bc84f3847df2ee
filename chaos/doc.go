// Package chaos holds Switchyard's chaos suite: tests that run the real
// switchyard binary (gateway and simulated vLLM replicas as separate
// processes, over loopback sockets) through replica crashes, reload storms,
// abusive clients and misbehaving replicas, and check that every request
// ends in an explicit outcome and that nothing leaks. It has no code of its
// own; `go test ./chaos/` runs it (a few tens of seconds).
package chaos
