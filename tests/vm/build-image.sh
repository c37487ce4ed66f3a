#!/usr/bin/env bash
# Build (or reuse) the bootable Debian bookworm VM image that the VM tier (tests/vm) boots
# under qemu with eight emulated NVMe disks.
#
# No loop device or mount is needed: the root file system is made by debootstrap into a
# folder and packed with `mkfs.ext4 -d`; the kernel and initrd are copied out of its /boot
# and handed to qemu directly (no boot loader). Root logs in over SSH with a key made here.
#
# The result is cached under .cache/vm/bookworm-<hash of this recipe>/ and reused while the
# recipe is unchanged:
#   root.raw            ext4 root file system (sparse), booted read-only through overlays
#   vmlinuz, initrd.img the Debian kernel (md, raid0, nvme, virtio in its initramfs)
#   id_ed25519          root's SSH key (test-only, made at build time)
#   ssh_host_ed25519_key.pub  the VM's host key (for known_hosts)
#
# usage: tests/vm/build-image.sh     -> prints the folder
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=(
  linux-image-amd64 initramfs-tools systemd-sysv udev dbus kmod sudo
  openssh-server python3 mdadm xfsprogs nvme-cli util-linux e2fsprogs
)
recipe_hash=$( { cat "$0"; printf '%s\n' "${packages[@]}" "$mirror"; } | sha256sum | cut -c1-12)
cache=${AMLHPC_VM_CACHE:-$root/.cache/vm}
out="$cache/bookworm-$recipe_hash"

if [ -f "$out/.complete" ]; then
  echo "$out"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "build-image: debootstrap needs root (run as root once; the result is cached)" >&2; exit 1; }

mkdir -p "$cache"
work=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
echo "building the VM image $out with debootstrap (a few minutes, once) ..." >&2
debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
  bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2
  echo "build-image: debootstrap failed: see the lines above (is $mirror reachable?)" >&2
  exit 1
}

# Root file system, host name, network (DHCP on the one virtio NIC, via systemd-networkd).
echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" >"$rootfs/etc/fstab"
echo amlhpc-vm >"$rootfs/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 amlhpc-vm\n' >"$rootfs/etc/hosts"
cat >"$rootfs/etc/systemd/network/10-dhcp.network" <<'NET'
[Match]
Name=en* eth*
[Network]
DHCP=ipv4
NET
ln -sf /lib/systemd/system/systemd-networkd.service \
  "$rootfs/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
# Units that only slow a TCG boot down.
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service \
            fstrim.timer man-db.timer systemd-networkd-wait-online.service mdcheck_start.timer \
            mdcheck_continue.timer mdmonitor-oneshot.timer; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done

# Root logs in with a key made for this image only.
ssh-keygen -q -t ed25519 -N '' -C amlhpc-vm-test -f "$work/id_ed25519"
install -d -m 0700 "$rootfs/root/.ssh"
install -m 0600 "$work/id_ed25519.pub" "$rootfs/root/.ssh/authorized_keys"

# A small initramfs: the root disk's drivers, NVMe and md. Debian's MODULES=most makes one
# that takes minutes to rebuild under TCG (the role rebuilds it after writing mdadm.conf).
echo MODULES=list >"$rootfs/etc/initramfs-tools/conf.d/amlhpc-vm.conf"
printf '%s\n' virtio_pci virtio_blk virtio_net ext4 nvme md_mod raid0 >>"$rootfs/etc/initramfs-tools/modules"
kver=$(find "$rootfs/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n 1)
chroot "$rootfs" update-initramfs -u -k "$kver" >"$work/initramfs.log" 2>&1 || {
  tail -n 20 "$work/initramfs.log" >&2; echo "build-image: update-initramfs failed in the chroot" >&2; exit 1; }
# The host key, so that the tests check it (ansible.cfg keeps host_key_checking on).
cp "$rootfs/etc/ssh/ssh_host_ed25519_key.pub" "$work/ssh_host_ed25519_key.pub"

chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/*

cp "$rootfs/boot/vmlinuz-$kver" "$work/vmlinuz"
cp "$rootfs/boot/initrd.img-$kver" "$work/initrd.img"
size_mb=$(( $(du -sm "$rootfs" | cut -f1) + 768 ))
mkfs.ext4 -q -F -L amlhpc-root -d "$rootfs" "$work/root.raw" "${size_mb}M"

mkdir -p "$out"
mv "$work/root.raw" "$work/vmlinuz" "$work/initrd.img" "$work/id_ed25519" "$work/id_ed25519.pub" \
  "$work/ssh_host_ed25519_key.pub" "$out/"
echo "$kver" >"$out/kernel-version"
touch "$out/.complete"
echo "$out"
