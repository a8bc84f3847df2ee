//go:build tools

// Package tools pins the kube-apiserver's module in go.mod.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
