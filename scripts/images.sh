#!/usr/bin/env bash
# Builds the project's container images with podman, with no image registry: the base is a Debian root
# filesystem made here by debootstrap from the Debian mirror apt already uses, Node.js 24 is the binary of
# the npm package `node` (scripts/node24.sh), npm dependencies come from the local npm cache.
#
#   scripts/images.sh          base images (cached), then every image of the project  (npm run images)
#   scripts/images.sh base     only the base images
#
# The Debian root filesystem is cached as a tarball under SVC_IMAGE_CACHE (default ~/.cache/svc-images),
# outside the clone, keyed by its recipe; podman keeps built layers in its own storage, so a second run
# rebuilds only what changed. Images: see docs/containers.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/node24.sh

export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/images/containers.conf}"
TAG="${SVC_IMAGE_TAG:-dev}"
CACHE="${SVC_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/svc-images}"
SUITE=bookworm

say() { echo "images: $*" >&2; }
die() { echo "images: $*" >&2; exit 1; }

command -v podman >/dev/null || die "needs podman (Debian packages podman runc; see docs/containers.md)"
mkdir -p "$CACHE"
# One preparation at a time on this machine (several clones share the cache and podman's storage).
exec 9>"$CACHE/.lock"
flock 9

build() { # build <image> <Dockerfile> <context> [podman build options…]
  local image=$1 file=$2 context=$3
  shift 3
  say "building $image"
  podman build --quiet --isolation chroot --network host --format docker --layers \
    --file "$file" --tag "$image" "$@" "$context" >/dev/null
}

image_id() { podman image inspect --format '{{.Id}}' "$1"; }
recipe() { { for part in "$@"; do if [ -f "$part" ]; then cat "$part"; else echo "$part"; fi; done; } | sha256sum | cut -c1-16; }
label_of() { podman image inspect --format "{{ index .Labels \"$2\" }}" "$1" 2>/dev/null || true; }

debian_base() {
  local mirror key tarball image=localhost/svc/debian:$SUITE
  mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${SVC_DEBIAN_MIRROR:-${mirror:-http://deb.debian.org/debian}}
  key=$(recipe "$SUITE" minbase "$mirror" "$(declare -f trim)")
  [ "$(label_of "$image" svc.recipe)" = "$key" ] && return
  tarball="$CACHE/debian-$SUITE-$key.tar"
  if [ ! -f "$tarball" ]; then
    command -v debootstrap >/dev/null || die "needs debootstrap (Debian package debootstrap)"
    local root
    root=$(mktemp -d /var/tmp/svc-debootstrap.XXXXXX)
    trap 'rm -rf "$root"' EXIT
    say "debootstrap $SUITE from $mirror (once; cached in $CACHE)"
    debootstrap --variant=minbase "$SUITE" "$root" "$mirror" >"$root.log" 2>&1 || die "debootstrap failed: see $root.log"
    rm -f "$root.log"
    trim "$root"
    tar -C "$root" --numeric-owner -cf "$tarball.part" .
    rm -f "$CACHE/debian-$SUITE-"*.tar  # an older recipe's
    mv "$tarball.part" "$tarball"
    rm -rf "$root"
    trap - EXIT
  fi
  say "importing $image"
  podman import --quiet --change "LABEL svc.recipe=$key" --change 'CMD ["/bin/bash"]' "$tarball" "$image" >/dev/null
}

# Trimmed like Debian's slim images: no docs, man pages, locales or apt lists, and none installed later.
trim() {
  local root=$1
  cat >"$root/etc/dpkg/dpkg.cfg.d/svc-slim" <<'CFG'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
path-exclude=/usr/share/lintian/*
CFG
  cat >"$root/etc/apt/apt.conf.d/svc-slim" <<'CFG'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
CFG
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  rm -rf "$root"/usr/share/{man,info,lintian}/* "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  find "$root/var/log" -type f -delete
}

base_images() {
  debian_base
  local key
  # podman would find these layers in its cache too, but only after copying Node.js and npm into a
  # context and hashing them: a recipe label answers at once.
  key=$(recipe images/node.Dockerfile images/node-build.Dockerfile "$(image_id localhost/svc/debian:$SUITE)" "$(node --version)" "$(npm --version)")
  if [ "$(label_of localhost/svc/node-build:24 svc.recipe)" != "$key" ]; then
    local context
    context=$(mktemp -d)
    trap 'rm -rf "$context"' RETURN
    cp "$(readlink -f "$(command -v node)")" "$context/node"
    cp -r "$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")" "$context/npm"
    build localhost/svc/node:24 images/node.Dockerfile "$context" --label "svc.recipe=$key"
    build localhost/svc/node-build:24 images/node-build.Dockerfile "$context" --label "svc.recipe=$key"
  fi
  key=$(recipe images/media.Dockerfile "$(image_id localhost/svc/node:24)")
  [ "$(label_of localhost/svc/media:$SUITE svc.recipe)" = "$key" ] \
    || build localhost/svc/media:$SUITE images/media.Dockerfile images --label "svc.recipe=$key"
}

project_images() {
  # npm ci inside the build reads this machine's npm cache (read-only overlay), never the network.
  local npm_cache
  npm_cache=$(npm config get cache 2>/dev/null)
  local deps=(--volume "$npm_cache:/npm-cache:O" --build-arg "NPM_FLAGS=--offline --cache /npm-cache")
  build "localhost/svc/platform:$TAG" api/Dockerfile . "${deps[@]}"
  build "localhost/svc/proxy:$TAG" proxy/Dockerfile . "${deps[@]}"
  build "localhost/svc/streaming-app:$TAG" streaming-app/Dockerfile . "${deps[@]}"
  for sample in echo slow sse error task-progress; do
    build "localhost/svc/$sample:$TAG" samples/Dockerfile . --target "$sample"
  done
  build localhost/svc/postgres:15 images/postgres.Dockerfile images
  build localhost/svc/coturn:4.6 images/coturn.Dockerfile images
}

case "${1:-all}" in
  base) base_images ;;
  all) base_images; project_images ;;
  *) die "usage: scripts/images.sh [base|all]" ;;
esac
say "done"
