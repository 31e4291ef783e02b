#!/usr/bin/env bash
# The base image every Switchyard image starts FROM: Debian bookworm built here with debootstrap
# from Debian's archive, then `docker import`ed. No container registry is contacted.
#
#   deploy/base-image.sh                   # builds $SWITCHYARD_BASE_IMAGE (default below)
#
# Contents: a minbase Debian with CPython 3.11 (Debian's python3, the version the project
# targets), python3-venv and CA certificates. Build tools come in the Dockerfiles' builder stage.
#
# Settings (environment):
#   SWITCHYARD_BASE_IMAGE   tag to create         (default switchyard/base:bookworm)
#   DEBIAN_MIRROR           the archive           (default http://deb.debian.org/debian)
#   SWITCHYARD_EXTRA_CA_DIR *.crt files the image should trust besides Debian's bundle, e.g. a
#                           TLS-inspecting proxy's CA; default: the host's local CAs
#                           (/usr/local/share/ca-certificates) when it has any.
#   REBUILD=1               rebuild even if the tag exists
set -euo pipefail

TAG=${SWITCHYARD_BASE_IMAGE:-switchyard/base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-${MIRROR%/debian}/debian-security}
EXTRA_CA_DIR=${SWITCHYARD_EXTRA_CA_DIR:-/usr/local/share/ca-certificates}
SUITE=bookworm

if [[ "${REBUILD:-0}" != 1 ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "base image $TAG exists (REBUILD=1 to rebuild)"
    exit 0
fi
command -v debootstrap >/dev/null || {
    echo "installing debootstrap from Debian's archive"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
}

rootfs=$(mktemp -d /var/tmp/switchyard-rootfs.XXXXXX)
cleanup() { rm -rf --one-file-system "$rootfs"; }
trap cleanup EXIT

echo "debootstrap $SUITE from $MIRROR into $rootfs"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$rootfs" "$MIRROR"

# Point releases and security updates too: the builder stage's Rust (rustc-web) lives there.
cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
EOF
# Small images: no docs, man pages or apt caches (Debian's own docker images do the same).
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/01-switchyard-nodoc" <<'EOF'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
cat >"$rootfs/etc/apt/apt.conf.d/01-switchyard-slim" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
EOF
if compgen -G "$EXTRA_CA_DIR/*.crt" >/dev/null; then
    echo "trusting the local CAs in $EXTRA_CA_DIR"
    cp "$EXTRA_CA_DIR"/*.crt "$rootfs/usr/local/share/ca-certificates/"
    chroot "$rootfs" update-ca-certificates >/dev/null
fi
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* \
    "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/log/*.log

# tar --numeric-owner keeps root-owned files root-owned inside the image.
tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    --message "Debian $SUITE minbase + python3 (debootstrap, $(date -u +%F))" - "$TAG"
docker image ls "$TAG"
