#!/usr/bin/env bash
# setup.sh -- install what loom needs to build and test (Debian/Ubuntu), then configure and
# build it into build/.  Safe to run again: it installs only what is missing.
#
#   LOOM_LLVM=19|22    which LLVM to build against (default 19)
#   LOOM_BUILD_DIR     build directory (default build)
set -euo pipefail
cd "$(dirname "$0")/.."

LLVM_VER="${LOOM_LLVM:-19}"
BUILD="${LOOM_BUILD_DIR:-build}"
pkgs=(build-essential cmake pkg-config "llvm-${LLVM_VER}-dev" libcriterion-dev libcjson-dev
      libxxhash-dev libzstd-dev zlib1g-dev)

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# the CUDA toolkit is optional for building (ptxas checks and NVRTC references use it)
if [ -d /usr/local/cuda/bin ]; then export PATH="$PATH:/usr/local/cuda/bin"; fi

cmake -S . -B "$BUILD" -DLOOM_LLVM_CONFIG="/usr/lib/llvm-${LLVM_VER}/bin/llvm-config" >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
