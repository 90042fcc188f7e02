#!/usr/bin/env bash
# test.sh -- set up, build, and run every test that runs without a GPU (and the GPU tests
# too, where there is one): the Criterion suite, then PTX for every template assembled with
# ptxas for sm_90a.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD="${LOOM_BUILD_DIR:-build}"
export PATH="$PATH:/usr/local/cuda/bin"
export LOOM_CACHE_DIR="${LOOM_CACHE_DIR:-$PWD/$BUILD/cache}"

echo "== loomc emit --all, assembled with ptxas -arch=sm_90a"
rm -rf "$BUILD/ptx" && mkdir -p "$BUILD/ptx"
if "$BUILD/loomc" emit --all --arch sm_90a -o "$BUILD/ptx"; then
    if command -v ptxas >/dev/null; then
        for f in "$BUILD"/ptx/*.ptx; do
            log=$(ptxas -arch=sm_90a -v "$f" -o /dev/null 2>&1) || { echo "$log"; echo "ptxas failed on $f"; exit 1; }
            if echo "$log" | grep -q "bytes spill" && echo "$log" | grep "bytes spill" | grep -vq " 0 bytes spill stores, 0 bytes spill loads"; then
                echo "$log"; echo "spills in $f"; exit 1
            fi
            echo "ptxas ok: $(basename "$f") $(echo "$log" | grep -o 'Used [0-9]* registers' | head -1)"
        done
    else
        echo "ptxas not found: PTX not assembled"
    fi
else
    echo "loomc emit --all failed"; exit 1
fi

echo "== Criterion tests"
"$BUILD/loom_tests" -j2
