#!/usr/bin/env bash
# Builds the operator image from the repository's Dockerfile with podman (no daemon: RUN steps run
# in a chroot), once per content, and prints its reference.
#
#   hack/image/build.sh                 build if needed; the image reference is the last line
#   hack/image/build.sh --standin-base  make (or find) the stand-in base below and print its
#                                       reference, nothing else
#
# The image is tagged localhost/agentpool:VERSION-HASH, HASH being that of what it is built from
# (the Dockerfile, the package, the examples, its base), and localhost/agentpool:VERSION. A second
# run on the same content finds the image and builds nothing.
#
# The base is the Dockerfile's BASE_IMAGE default, the official Python image, where a registry
# answers. Where none does, a stand-in is made from Debian's packages (bookworm with python3, pip
# and venv, by mmdebstrap), imported with `podman import` and passed as BASE_IMAGE.
#
# pip inside the build reaches the package index as this machine's pip does: its index, trusted
# hosts and CA bundle are handed to the build as secrets, mounted for the pip steps only, so they
# are written neither into the repository nor into the image.
#
# AGENTPOOL_CACHE overrides the cache root (default ~/.cache/agentpool).
# AGENTPOOL_BASE_IMAGE names the base to build on, skipping the search above.
# AGENTPOOL_DEBIAN_MIRROR overrides the Debian mirror of the stand-in base.
# Exit code 3: podman is missing and cannot be installed here.
set -euo pipefail
# A failure inside $(...) stops the script too, not only the command that substitutes it.
shopt -s inherit_errexit

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
root="${AGENTPOOL_CACHE:-$HOME/.cache/agentpool}"
out="$root/image"
mirror="${AGENTPOOL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# What the stand-in base is made of; its tag carries a hash of these lines.
base_suite=bookworm
base_packages=python3,python3-pip,python3-venv,ca-certificates

install_debian_packages() {
    # Installs the named Debian packages when apt-get can (as root); returns 1 where it cannot.
    [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1 || return 1
    echo "installing $* from Debian's packages" >&2
    apt-get update -qq >&2 || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2 || return 1
}

if ! command -v podman >/dev/null 2>&1; then
    if ! install_debian_packages podman; then
        echo "podman is not installed and cannot be installed here (needs root and apt-get)" >&2
        exit 3
    fi
fi

mkdir -p "$out"
# One build at a time: a second caller waits, then finds the first one's image.
exec 9>"$out/.lock"
flock 9

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml" | head -n 1)"
official_base="$(sed -n 's/^ARG BASE_IMAGE=//p' "$repo/Dockerfile" | head -n 1)"

standin_base() {
    # The stand-in base from Debian's packages, made once and kept in podman's storage.
    local key ref tarball
    key="$(printf '%s\n' "$base_suite" "$base_packages" "$mirror" merged-usr minbase \
        | sha256sum | cut -c1-12)"
    ref="localhost/agentpool-base:$base_suite-$key"
    if podman image exists "$ref"; then
        echo "$ref"
        return
    fi
    if ! command -v mmdebstrap >/dev/null 2>&1; then
        install_debian_packages mmdebstrap || {
            echo "mmdebstrap is not installed and cannot be installed here" >&2
            return 1
        }
    fi
    echo "making the base $ref from Debian's packages: $base_suite with $base_packages" >&2
    # Called in $(...), a subshell: this trap removes the tarball's folder when the subshell
    # ends, made or failed. By then the function has returned and its locals are gone, so the
    # trap carries the folder's path itself, not the variable's name.
    local folder
    folder="$(mktemp -d "$out/base.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf -- $(printf '%q' "$folder")" EXIT
    tarball="$folder/base.tar"
    local start=$SECONDS
    # minbase with merged /usr by a hook rather than the usrmerge package (which brings perl);
    # no documentation, manual pages or translations.
    mmdebstrap --mode=root --variant=minbase --include="$base_packages" \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        "$base_suite" "$tarball" \
        "deb $mirror $base_suite main" \
        "deb $mirror $base_suite-updates main" \
        "deb ${mirror%/debian}/debian-security $base_suite-security main" >&2
    # The official image's PATH and command, which an imported tarball lacks.
    podman import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["python3"]' \
        "$tarball" "$ref" >&2
    echo "made the base in $((SECONDS - start)) s" >&2
    echo "$ref"
}

if [[ "${1:-}" == --standin-base ]]; then
    # The stand-in base step alone, whatever a registry would answer: what a machine that never
    # made it goes through first, in a subshell as below.
    base="$(standin_base)"
    echo "$base"
    exit 0
fi

if [[ -n "${AGENTPOOL_BASE_IMAGE:-}" ]]; then
    base="$AGENTPOOL_BASE_IMAGE"
elif podman image exists "$official_base" \
    || timeout 60 podman pull --quiet "$official_base" >/dev/null 2>&1; then
    base="$official_base"
else
    echo "no registry answered for $official_base: building on a stand-in from Debian" >&2
    base="$(standin_base)"
fi
base_id="$(podman image inspect --format '{{.Id}}' "$base")"

# The hash of all the build reads: the files the build context keeps (.dockerignore), the base
# image and this script.
content_hash() {
    (
        cd "$repo"
        {
            printf '%s\n' Dockerfile .dockerignore pyproject.toml README.md
            find operator examples -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
                ! -path '*.egg-info/*'
        } | LC_ALL=C sort | while IFS= read -r file; do
            printf '%s  %s\n' "$(sha256sum <"$file" | cut -d' ' -f1)" "$file"
        done
        echo "base $base_id"
        sha256sum <"$here/build.sh"
    ) | sha256sum | cut -c1-12
}
hash="$(content_hash)"
image="localhost/agentpool:$version-$hash"
stamp="$out/agentpool-$version-$hash.id"

if [[ -f "$stamp" ]] && podman image exists "$image" \
    && [[ "$(podman image inspect --format '{{.Id}}' "$image")" == "$(cat "$stamp")" ]]; then
    # The version's tag follows the content in hand, even where another build moved it since.
    podman tag "$image" "localhost/agentpool:$version"
    echo "image $image cached (base $base)" >&2
    echo "$image"
    exit 0
fi

# pip's settings on this machine, the environment over the files as pip itself ranks them, turned
# into a pip.conf for the build. The CA bundle goes in as a second secret; a local find-links
# folder stays out, since the build cannot see the machine's folders.
secrets="$(mktemp -d)"
trap 'rm -rf "$secrets"' EXIT
pip_python="$(command -v python3 || true)"
{
    echo "[global]"
    if [[ -n "$pip_python" ]] && "$pip_python" -m pip --version >/dev/null 2>&1; then
        "$pip_python" -m pip config list 2>/dev/null | "$pip_python" -c '
import sys
wanted = ("index-url", "extra-index-url", "trusted-host", "cert", "client-cert", "default-timeout", "timeout", "retries")
found = {}
for line in sys.stdin:
    key, _, value = line.rstrip("\n").partition("=")
    scope, _, name = key.rpartition(".")
    value = value.strip().strip("\x27\"")
    if name in wanted and (scope == ":env:" or name not in found):
        found[name] = value
for name, value in found.items():
    print(f"{name} = {value}")
'
    fi
} >"$secrets/pip.conf.machine"
# The CA bundle and the client certificate are files of this machine: each goes in as a secret of
# its own, at the path the build's pip.conf names, or is left out where the file is absent.
secret_args=()
for setting in cert client-cert; do
    file="$(sed -n "s/^$setting = //p" "$secrets/pip.conf.machine")"
    if [[ -n "$file" && -f "$file" ]]; then
        cp "$file" "$secrets/pip-$setting"
        sed -i "s|^$setting = .*|$setting = /run/secrets/pip-$setting|" "$secrets/pip.conf.machine"
        secret_args+=(--secret "id=pip-$setting,src=$secrets/pip-$setting")
    else
        sed -i "/^$setting = /d" "$secrets/pip.conf.machine"
    fi
done
mv "$secrets/pip.conf.machine" "$secrets/pip.conf"
secret_args+=(--secret "id=pip.conf,src=$secrets/pip.conf")

echo "building $image on $base (podman build --isolation chroot)" >&2
start=$SECONDS
# No layer cache: podman's (buildah 1.28) keys a RUN step by its command alone, not by what a
# --mount=type=bind,from=builder brings in, so a changed wheel would reuse the old install layer.
# The content hash above is the cache instead.
podman build --isolation chroot --pull=never --layers=false --no-cache \
    --build-arg "BASE_IMAGE=$base" \
    "${secret_args[@]}" \
    --tag "$image" --tag "localhost/agentpool:$version" \
    --file "$repo/Dockerfile" "$repo" >&2
podman image inspect --format '{{.Id}}' "$image" >"$stamp"
echo "built $image in $((SECONDS - start)) s" >&2
echo "$image"
