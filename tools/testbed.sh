#!/usr/bin/env bash
# Make the node test bed from nothing: a Docker engine and a Debian bookworm image that
# boots systemd as PID 1. Idempotent: leaves a running dockerd alone, and reuses the image
# while its recipe (this script + packages.txt) is unchanged (content hash in the tag).
#   tools/testbed.sh          ensure engine + image, print the image name last
#   tools/testbed.sh --image  print the image name only (no side effects)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
suite=${TESTBED_SUITE:-bookworm}
repo=${TESTBED_REPO:-sglang-node}
recipe_hash=$( (cat "$here/testbed.sh" "$here/testbed/packages.txt"; echo "$suite") | sha256sum | cut -c1-12)
image="$repo:$suite-$recipe_hash"
if [[ ${1:-} == --image ]]; then echo "$image"; exit 0; fi

log() { echo "testbed: $*" >&2; }
need_root() { [[ $(id -u) == 0 ]] || { log "must run as root (installs packages, starts dockerd)"; exit 1; }; }

apt_updated=
apt_install() {
  need_root
  if [[ -z $apt_updated ]]; then
    log "apt-get update"; DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null; apt_updated=1
  fi
  log "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# 1. Packages. The docker CLI alone may exist without an engine, so test for dockerd.
command -v dockerd >/dev/null 2>&1 || apt_install docker.io
command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap

# 2. Engine. No bridge and no iptables: containers run with --network none on these hosts.
if ! docker info >/dev/null 2>&1; then
  need_root
  log "starting dockerd (--bridge=none --iptables=false)"
  mkdir -p /var/log
  nohup dockerd --bridge=none --iptables=false --ip6tables=false >/var/log/dockerd-testbed.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "dockerd did not come up; see /var/log/dockerd-testbed.log"; tail -20 /var/log/dockerd-testbed.log >&2; exit 1; }
fi

# 3. Image: debootstrap minbase piped into `docker import` (no registry is reachable).
if docker image inspect "$image" >/dev/null 2>&1; then
  log "image $image present (recipe unchanged)"
else
  need_root
  work=$(mktemp -d /var/tmp/testbed.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  log "building $image with debootstrap (about a minute)"
  include=$(paste -sd, "$here/testbed/packages.txt")
  debootstrap --variant=minbase --include="$include" "$suite" "$work/root" >"$work/debootstrap.log" 2>&1 \
    || { tail -30 "$work/debootstrap.log" >&2; log "debootstrap failed"; exit 1; }
  # Units that cannot work in a container without network or real hardware only add noise.
  chroot "$work/root" systemctl mask systemd-networkd-wait-online.service systemd-timesyncd.service \
    getty@tty1.service console-getty.service >/dev/null 2>&1 || true
  rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
  tar -C "$work/root" -c . | docker import \
    -c 'ENV container=docker' -c 'CMD ["/lib/systemd/systemd"]' \
    -m "testbed recipe $recipe_hash" - "$image" >/dev/null
  docker tag "$image" "$repo:$suite"
  log "built $image"
fi
echo "$image"
