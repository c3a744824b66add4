#!/usr/bin/env bash
# A local stand-in for the Debian bookworm base images that deploy/Dockerfile
# names (debian:bookworm-slim, python:3.11-slim-bookworm), for a machine that
# reaches Debian's mirror but no container registry (CI's): debootstrap's
# minimal bookworm with python3-pip, trusting this host's certificate
# authorities (pip in the image then reaches PyPI the way the host does),
# imported into podman under the name given (default
# localhost/provd-base:bookworm). Nothing is done when the image exists.
set -euo pipefail
image=${1:-localhost/provd-base:bookworm}
podman image exists "$image" && exit 0
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3-pip,ca-certificates bookworm "$root" \
  "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >/dev/null
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | podman import --quiet - "$image" >/dev/null
echo "$image: debootstrap's bookworm, $(du -sh "$root" | cut -f1)"
