#!/usr/bin/env bash
# Builds the kube-apiserver that the Kubernetes tests run (internal/kubetest)
# from k8s.io/kubernetes through the Go module proxy, into a cache outside
# the clone, once per machine:
#
#   ${XDG_CACHE_HOME:-~/.cache}/switchyard/kube-apiserver-v1.37.2/kube-apiserver
#
# The module in .ci/kube-apiserver/ pins it (its go.sum checks every
# download). A cached binary built from the same go.mod and go.sum is kept;
# otherwise it is rebuilt at low priority (about 15 minutes of CPU on two
# cores, measured in README.md). Keep the version in step with
# internal/kubetest's Version.
set -euo pipefail
cd "$(dirname "$0")/kube-apiserver"

version=v1.37.2
cache="${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/kube-apiserver-$version"
stamp=$(cat go.mod go.sum | sha256sum | cut -d' ' -f1)
if [ -x "$cache/kube-apiserver" ] && [ "$(cat "$cache/stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp "$cache/kube-apiserver.XXXXXX")
trap 'rm -f "$tmp"' EXIT
start=$(date +%s)
nice -n 15 go build -o "$tmp" k8s.io/kubernetes/cmd/kube-apiserver
mv "$tmp" "$cache/kube-apiserver"
echo "$stamp" >"$cache/stamp"
echo "built kube-apiserver $version in $(( $(date +%s) - start ))s into $cache"
