// Package deploy holds no code: it is the home of the tests of the
// Kubernetes manifests (kustomize/), the Helm chart (helm/switchyard/) and the
// container image's build (the repository's Dockerfile and .dockerignore).
//
// The tests render the manifests with kustomize and Helm at pinned versions
// (`go run MODULE@VERSION`, so neither tool is a dependency of the module),
// decode every object strictly into its Kubernetes or Prometheus Operator
// type, and check what the gateway relies on: the probes, the policy in the
// ConfigMap, the admin token wiring, the alert rules. docs/deploy.md
// describes the objects.
package deploy
