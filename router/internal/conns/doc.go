// Package conns bounds the connections a listener holds open and shares
// them fairly between clients: idle connections give way to busy ones at
// the cap, one client address has a cap of its own, and idle timeouts
// shrink under pressure. It also knows the machine's own addresses, so a
// replica address that is the gateway itself can be refused. The caps
// come from the running config through Options.Limits; it imports no
// Switchyard package.
package conns
