// Package routing evaluates a loaded config's routes: it decides, for one
// request, which route it takes and which pools to try.
//
// It owns route evaluation and nothing of the config file: [New] compiles
// a validated [policy.Config] into an immutable [Policy] that keeps
// nothing of it, and [Policy.Decide] evaluates the routes in order for a
// [Request] (first match wins), calling the classifier lazily, only when
// a class or score condition is reached, and explaining its [Decision] on
// demand. It also owns what outlives a decision: the sticky sessions
// ([Sessions]: a session's decision is kept and moves up, never down;
// [Policy.Escalate] keeps a conversation that outgrew a pool's context on
// the larger one) and the share controller ([Controller], control.share:
// one pool's share of policy-routed requests held at a target by moving
// the routes' auto score bounds).
//
// routing imports package policy (the config types it compiles) and its
// own session store and share controller (policy/routing/internal), and
// no other Switchyard package. Loading, defaults and validation stay in
// policy; routing assumes a config that Load validated.
package routing
