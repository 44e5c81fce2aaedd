#!/usr/bin/env bash
# bench/carry.sh [PACKAGE...] - on a machine with a network and Debian 12's
# apt (the development machine), download the Debian packages a GPU machine
# lacks into .carry/ (ignored by git; the device tool's `carry` takes
# ".carry"). bench/gpu.sh asks pkg-config on the GPU machine which of json-c
# and cmocka it lacks and unpacks only those packages (dpkg -x into
# .carry/root); what the machine has is left alone.
#
# Default: json-c and cmocka, library and headers (libjson-c5 libjson-c-dev
# libcmocka0 libcmocka-dev, about 150 KB): what the GPU machines lacked on
# 2026-11-26 (../shared/device-notes.md). Open MPI is never carried (the
# machines have Open MPI 4.1.6 with mpicc; Debian's mpicc is an
# alternatives link that is not in its package): such names are refused.
# Packages already in .carry/ are not downloaded again. The packages are
# Debian 12's: they need glibc >= 2.36 on the GPU machine (Ubuntu 24.04 has
# 2.39).
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=("$@")
[ ${#PKGS[@]} -gt 0 ] || PKGS=(libjson-c5 libjson-c-dev libcmocka0 libcmocka-dev)
for p in "${PKGS[@]}"; do
  case "$p" in
    *openmpi* | *mpich* | *pmix* | *hwloc* | *ucx* | *libfabric*)
      echo "carry.sh: $p: Open MPI and its runtime are never carried (the GPU machine's own is used)" >&2
      exit 2
      ;;
  esac
done
mkdir -p .carry
cd .carry
WANT=()
for p in "${PKGS[@]}"; do
  if ls "${p}"_*.deb > /dev/null 2>&1; then
    echo "carry.sh: $p: already in .carry/ ($(ls "${p}"_*.deb | head -1))"
  else
    WANT+=("$p")
  fi
done
[ ${#WANT[@]} = 0 ] || apt-get download "${WANT[@]}"
echo "carry.sh: $(ls ./*.deb | wc -l) package(s) in .carry/ ($(du -sh . | cut -f1)): $(ls ./*.deb | tr '\n' ' ')"
