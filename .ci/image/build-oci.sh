#!/usr/bin/env bash
# Builds the dralens container image from Debian packages only, without a container daemon or a
# registry, into an OCI archive (`skopeo copy oci-archive:...`, `podman load -i ...`).
#
# The image has the content of the Dockerfile's runtime stage: Debian bookworm's minbase set
# (what debian:bookworm-slim is built from) under the slim dpkg filters of .ci/image/dpkg-excludes,
# the packages of .ci/image/runtime-packages, and the stripped binary as /usr/bin/dralens. Two
# layers: the Debian root filesystem (mmdebstrap; cached under WORK_DIR until its inputs change)
# and the binary. Labels carry the version the binary reports, the source and the revision.
#
# Usage: .ci/image/build-oci.sh BINARY ARCHIVE [WORK_DIR]
# Environment:
#   IMAGE_REPOSITORY        image name without tag (default ghcr.io/dralens/dralens); the tag is
#                           the binary's version, which is the chart's appVersion
#   DEBIAN_MIRROR           (default http://deb.debian.org/debian)
#   DEBIAN_SECURITY_MIRROR  (default http://deb.debian.org/debian-security)
#   SOURCE_DATE_EPOCH       timestamps of every file and of the image (default: the commit time
#                           of HEAD for the binary's layer and the config, and of the last
#                           change under image/ for the Debian layer, which is then reused
#                           across commits): the same commit and mirror content give the same
#                           image
# Needs root (mmdebstrap's root mode) and the packages of `.ci/install-deps image`.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 BINARY ARCHIVE [WORK_DIR]" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../.." && pwd)"
binary="$(realpath "$1")"
archive="$(realpath -m "$2")"
work="$(realpath -m "${3:-$(dirname "$archive")/image}")"
repository="${IMAGE_REPOSITORY:-ghcr.io/dralens/dralens}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
source_url="https://github.com/dralens/dralens"

die() {
  echo "build-oci: $*" >&2
  exit 1
}
[ "$(id -u)" -eq 0 ] || die "needs root (mmdebstrap --mode=root); run it with sudo"
for tool in mmdebstrap umoci strip tar sha256sum; do
  command -v "$tool" >/dev/null || die "$tool is missing; run ./.ci/install-deps image"
done
[ -x "$binary" ] || die "$binary is not an executable"
version="$("$binary" --version | awk '{print $2}')"
[ -n "$version" ] || die "$binary --version printed no version"
revision="$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)"
if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
  base_epoch="$SOURCE_DATE_EPOCH"
else
  SOURCE_DATE_EPOCH="$(git -C "$src" log -1 --format=%ct 2>/dev/null || date +%s)"
  base_epoch="$(git -C "$src" log -1 --format=%ct -- .ci/image 2>/dev/null)"
  base_epoch="${base_epoch:-$SOURCE_DATE_EPOCH}"
fi
export SOURCE_DATE_EPOCH
created="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
ref="$repository:$version"
mkdir -p "$work"

# A deterministic layer: sorted names, numeric owners, times clamped to EPOCH, no ./ prefix.
pack_layer() {  # DIR TAR EPOCH
  (cd "$1" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
    tar --no-recursion --numeric-owner --mtime="@$3" --clamp-mtime \
      --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
      --format=posix -cf "$2" -T -)
}

# Layer 1: the Debian root filesystem, rebuilt only when the package list, the filters, this
# script, the mirrors or its timestamp change.
packages="$(grep -v '^\s*#' "$here/runtime-packages" | grep -v '^\s*$' | paste -sd, -)"
key="$(cat "$here/runtime-packages" "$here/dpkg-excludes" "$0" |
  sha256sum | cut -d' ' -f1)-$(echo "$mirror $security_mirror $base_epoch" | sha256sum | cut -c1-16)"
base="$work/base.tar"
if [ "$(cat "$work/base.key" 2>/dev/null)" != "$key" ] || [ ! -s "$base" ]; then
  rm -rf "$work/rootfs" "$base" "$work/base.key"
  echo "build-oci: building the Debian root filesystem with mmdebstrap (bookworm minbase)" >&2
  # The hook dir gives the merged /usr of debootstrap and of the Debian images; without it apt
  # picks usrmerge, which pulls in perl.
  SOURCE_DATE_EPOCH="$base_epoch" mmdebstrap --variant=minbase --mode=root --format=directory \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt="$here/dpkg-excludes" \
    --include="$packages" \
    --customize-hook='mv "$1/etc/dpkg/dpkg.cfg.d/99mmdebstrap" "$1/etc/dpkg/dpkg.cfg.d/dralens-slim"' \
    --customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"' \
    bookworm "$work/rootfs" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
    "deb $security_mirror bookworm-security main" >"$work/mmdebstrap.log" 2>&1 ||
    { tail -n 40 "$work/mmdebstrap.log" >&2; die "mmdebstrap failed; its log: $work/mmdebstrap.log"; }
  # What the filters exclude but maintainer scripts created anyway (info/dir, base-files' FAQ)
  # goes too, as in Debian's slim images.
  sed -n 's/^path-exclude=//p' "$here/dpkg-excludes" | while read -r pattern; do
    find "$work/rootfs${pattern%/\*}" -mindepth 1 ! -type d 2>/dev/null || true
  done | while read -r f; do
    keep=0
    while read -r include; do
      # shellcheck disable=SC2254  # the include lines are glob patterns
      case "${f#"$work/rootfs"}" in $include) keep=1 ;; esac
    done < <(sed -n 's/^path-include=//p' "$here/dpkg-excludes")
    [ "$keep" = 1 ] || rm -f "$f"
  done
  find "$work/rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
  # The container runtime provides /dev; the layer carries the empty directory only.
  find "$work/rootfs/dev" -mindepth 1 -delete
  pack_layer "$work/rootfs" "$base" "$base_epoch"
  rm -rf "$work/rootfs"
  echo "$key" >"$work/base.key"
fi

# Layer 2: the binary, stripped of its debug information.
rm -rf "$work/app" && mkdir -p "$work/app/usr/bin"
strip --strip-unneeded -o "$work/app/usr/bin/dralens" "$binary"
chmod 0755 "$work/app/usr/bin/dralens"
pack_layer "$work/app" "$work/app.tar" "$SOURCE_DATE_EPOCH"

# The OCI image.
layout="$work/oci"
rm -rf "$layout"
umoci init --layout "$layout"
umoci new --image "$layout:$ref"
umoci raw add-layer --image "$layout:$ref" --history.created="$created" \
  --history.created_by="mmdebstrap --variant=minbase bookworm + .ci/image/runtime-packages" "$base"
umoci raw add-layer --image "$layout:$ref" --history.created="$created" \
  --history.created_by="COPY dralens /usr/bin/dralens" "$work/app.tar"
umoci config --image "$layout:$ref" --created="$created" --history.created="$created" \
  --architecture=amd64 --os=linux \
  --config.entrypoint=/usr/bin/dralens \
  --config.env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.label=org.opencontainers.image.title=dralens \
  --config.label="org.opencontainers.image.description=Kubernetes DRA driver for GPUs with observability built in" \
  --config.label=org.opencontainers.image.version="$version" \
  --config.label=org.opencontainers.image.source="$source_url" \
  --config.label=org.opencontainers.image.revision="$revision"
umoci gc --layout "$layout"

# The archive: the layout directory as one tar, the format of skopeo's oci-archive transport.
mkdir -p "$(dirname "$archive")"
pack_layer "$layout" "$archive.tmp" "$SOURCE_DATE_EPOCH"
mv "$archive.tmp" "$archive"
echo "build-oci: $archive ($ref, $(du -m "$archive" | cut -f1) MiB)" >&2
