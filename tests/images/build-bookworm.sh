#!/usr/bin/env bash
# Build the Debian bookworm base image that molecule and the multi-node tests run on.
# There is no image registry here, so the image is made with debootstrap and
# `docker import`. The tag carries a hash of this script: a changed recipe builds anew,
# an unchanged one is reused (docker keeps it between runs).
#
# usage: tests/images/build-bookworm.sh            -> prints the image tag
set -euo pipefail

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=(
  python3 python3-apt sudo openssh-server openssh-client iproute2 procps
  ca-certificates gnupg kmod xfsprogs mdadm nvme-cli util-linux lsb-release
  apt-transport-https libsecret-1-0 iperf3
)
recipe_hash=$( { cat "$0"; printf '%s\n' "${packages[@]}" "$mirror"; } | sha256sum | cut -c1-12)
tag="amlhpc/bookworm:${recipe_hash}"

if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi

work=$(mktemp -d /tmp/amlhpc-rootfs.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "building $tag with debootstrap (a few minutes, once) ..." >&2
debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
  bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2
  echo "debootstrap failed: see the lines above (is $mirror reachable?)" >&2
  exit 1
}
# Containers start sshd by hand; keep the image small and reproducible.
chroot "$work/rootfs" apt-get clean
rm -rf "$work/rootfs"/var/lib/apt/lists/* "$work/rootfs"/etc/ssh/ssh_host_*
mkdir -p "$work/rootfs/run/sshd"
tar -C "$work/rootfs" -c . | docker import \
  --change 'CMD ["sleep", "infinity"]' \
  --change 'ENV container=docker' - "$tag" >/dev/null
docker tag "$tag" amlhpc/bookworm:latest
echo "$tag"
