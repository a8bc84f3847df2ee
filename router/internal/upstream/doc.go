// Package upstream is the gateway's side of a replica: the one executor
// (Executor.Execute, the only retry loop, with the retry and poison rules),
// the phase clock that bounds one attempt (response headers, first token,
// idle gaps, whole stream), how an answer or a failure to get one is judged
// for passive health and retries, and the headers of an outbound request
// (hop-by-hop headers dropped, forwarding headers set). An attempt is
// anything that implements Attempt: a client request's, a classifier
// call's, a stream continuation's. It imports pools and no other
// Switchyard package.
package upstream
