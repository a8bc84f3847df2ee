// Package policy owns Switchyard's configuration file and the routing policy
// it describes.
//
// It has one job: turn the operator's YAML into a validated, immutable
// [Config] (strict decode over the defaults → validate → resolve secrets →
// compile, every problem reported as FILE:LINE:COL), and compile the
// `routes` section into a [Policy] that decides, for one request, which
// route matches and which pools to try.
//
// policy is a leaf: it imports no other Switchyard package. Names that live
// in other packages' registries (balancers, classifier kinds) are passed in
// through [LoadOptions] so that there is one registry per strategy family.
package policy
