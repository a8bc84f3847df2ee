// Package examples embeds the example policies so that `switchyard demo`
// runs on a fresh machine with nothing but the binary.
package examples

import "embed"

// Policies holds policies/*.yaml.
//
//go:embed policies/*.yaml
var Policies embed.FS
