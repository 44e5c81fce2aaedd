#!/usr/bin/env bash
# bench/carry.sh [PACKAGE...] - on a machine with a network and Debian 12's
# apt (the CI image), download the Debian packages a GPU machine may lack
# into .carry/ (ignored by git; hand it to the GPU machine with the working
# tree: the device tool's `carry` takes ".carry"). bench/gpu.sh unpacks them
# with dpkg -x into .carry/root and points CMake, pkg-config, Open MPI and
# the loader at them (docs/cuda.md, "On a GPU machine").
#
# Default: json-c and cmocka (library and headers) and Open MPI with the
# libraries its runtime loads that a minimal image may not have. First check
# on the GPU machine what is missing (`pkg-config --list-all | grep -E
# 'json-c|cmocka'`, `command -v mpiexec`) and carry only that: pass the
# package names, e.g. `bench/carry.sh libjson-c5 libjson-c-dev libcmocka0
# libcmocka-dev`. The packages are Debian 12's: they need glibc >= 2.36 on
# the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=("$@")
if [ ${#PKGS[@]} = 0 ]; then
  PKGS=(libjson-c5 libjson-c-dev libcmocka0 libcmocka-dev
        openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev
        libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-dev libhwloc15 libhwloc-plugins libhwloc-dev
        libpmix2 libpmix-dev libmunge2 libfabric1 libucx0 libibverbs1 libibverbs-dev ibverbs-providers
        librdmacm1 libnl-3-200 libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libnuma1)
fi
mkdir -p .carry
cd .carry
apt-get download "${PKGS[@]}"
echo "carry.sh: $(ls *.deb | wc -l) packages in .carry/ ($(du -sh . | cut -f1))"
