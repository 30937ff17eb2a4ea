#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kubectl and etcd from their Go
# modules, once, into a cache folder keyed by version, and prints its path.
#
#   hack/controlplane/build.sh          build if needed; the path is the last line
#
# AGENTPOOL_CACHE overrides the cache root (default ~/.cache/agentpool).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module_version() { grep -oE "$1 v[0-9][^ ]*" "$2" | head -n 1 | cut -d' ' -f2; }
kube_version="$(module_version 'k8s.io/kubernetes' "$here/go.mod")"
etcd_version="$(module_version 'go.etcd.io/etcd/server/v3' "$here/etcd/go.mod")"
root="${AGENTPOOL_CACHE:-$HOME/.cache/agentpool}"
out="$root/kube-$kube_version"
stamp="$out/.built-etcd-$etcd_version"

if [[ -f "$stamp" ]]; then
    echo "control plane $kube_version (etcd $etcd_version) cached in $out" >&2
    echo "$out"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    echo "go is not installed: cannot build the control plane" >&2
    exit 3
fi

mkdir -p "$out"
start=$SECONDS
minor="${kube_version#v1.}"
minor="${minor%%.*}"
pkg=k8s.io/component-base/version
ldflags="-s -w \
 -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor \
 -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=$kube_version"

echo "building Kubernetes $kube_version into $out (a cold build takes a while)" >&2
(
    cd "$here"
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/" \
        k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kubectl
)
echo "building etcd $etcd_version" >&2
(
    cd "$here/etcd"
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/etcd" .
)
touch "$stamp"
echo "built the control plane in $((SECONDS - start)) s" >&2
echo "$out"
