// Package yamlnode reads goccy/go-yaml AST nodes the way the config loader
// needs them: a mapping's pairs and keys, a scalar's text, string or
// number, a node described for an error message, and where it stands in
// the file. It imports no Switchyard package.
package yamlnode
