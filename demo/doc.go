// Package demo runs Switchyard end to end on one machine: a simulated
// vLLM cluster (the vllmsim package) laid out as a config describes, the
// gateway in front of it, and a load of agent-like traffic with a live
// report. `switchyard demo`, its test and the capacity benchmark use it.
package demo
