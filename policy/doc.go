// Package policy owns Switchyard's configuration file.
//
// It has one job: turn the operator's YAML into a validated, immutable
// [Config] (strict decode over the defaults → validate → resolve secrets →
// compile, every problem reported as FILE:LINE:COL in an [Errors]).
// Evaluating the config's `routes` section for a request (which route it
// takes, which pools to try) is not policy's job: package policy/routing
// compiles a Config into the policy that decides.
//
// policy is a leaf: it imports no other Switchyard package, only its own
// YAML node readers (policy/internal/yamlnode). Names that live in other
// packages' registries (balancers, classifier kinds) are passed in through
// [LoadOptions] so that there is one registry per strategy family.
package policy
