#!/usr/bin/env bash
# The base image the execution environment is test-built on here: Debian trixie (Python 3.13;
# ansible-core 2.21 needs >= 3.12 on the controller, so bookworm's 3.11 will not do). There is
# no image registry here (no ubi9), so the image is made with debootstrap and `docker import`,
# like tests/images/build-bookworm.sh. The tag carries a hash of the recipe: an unchanged
# one is reused.
#
# It holds python3 (without pip: ansible-builder's ensurepip step puts it in), curl for the
# azcopy download, and the build host's CA bundle: where TLS is intercepted by a proxy (as on
# this machine), pip and curl inside the build must trust what the host trusts.
#
# usage: tests/ee/build-trixie-base.sh      -> prints the image tag
set -euo pipefail

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=trixie
packages=(python3 ca-certificates curl)
host_ca=${EE_HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
recipe_hash=$( { cat "$0"; printf '%s\n' "${packages[@]}" "$mirror" "$suite"
                 [ -f "$host_ca" ] && cat "$host_ca"; } | sha256sum | cut -c1-12)
tag="ee-amlhpc-trixie-base:${recipe_hash}"

if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi

work=$(mktemp -d /tmp/ee-rootfs.XXXXXX)
# debootstrap mounts /proc and /sys in the root it builds: an interrupted run leaves them.
cleanup() {
  umount "$work/rootfs/proc" "$work/rootfs/sys" 2>/dev/null || true
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
echo "building $tag with debootstrap (a few minutes, once) ..." >&2
debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
  "$suite" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2
  echo "debootstrap failed: see the lines above (is $mirror reachable?)" >&2
  exit 1
}
if [ -f "$host_ca" ]; then
  cp "$host_ca" "$work/rootfs/usr/local/share/ca-certificates/build-host-bundle.crt"
  chroot "$work/rootfs" update-ca-certificates >/dev/null 2>&1
fi
# Package lists are fetched again in the build (ansible-builder's package steps): an old
# list in a cached image would point at files the mirror no longer has.
chroot "$work/rootfs" apt-get clean
rm -rf "$work/rootfs"/var/lib/apt/lists/*
tar -C "$work/rootfs" -c . | docker import \
  --change 'CMD ["bash"]' \
  --change 'ENV LANG=C.UTF-8' - "$tag" >/dev/null
echo "$tag"
