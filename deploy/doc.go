// Package deploy holds no code: it is the home of the tests of the
// Kubernetes manifests (kustomize/), the Helm chart (helm/switchyard/) and the
// container image's build (the repository's Dockerfile and .dockerignore).
//
// The tests render the manifests with kustomize's and Helm's libraries at
// the versions go.mod pins (as `kustomize build` and `helm template` do,
// inside the test process), decode every object strictly into its
// Kubernetes or Prometheus Operator type, and check what the gateway relies
// on: the probes, the policy in the ConfigMap, the admin token wiring, the
// alert rules. They also build the binary as the Dockerfile does (package
// imagebuild, which the chaos suite shares) and check that it is static.
// docs/deploy.md describes the objects.
package deploy
