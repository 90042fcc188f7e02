#!/usr/bin/env bash
# run.sh -- loom's main job on sensible defaults: set up, build, write PTX for every
# template (build/ptx), then run every template with random inputs checked against its
# plain-C reference.  With a GPU: at the default (benchmark) shapes, on the GPU and on the
# interpreter, showing that both agree.  Without one: it says so and runs the interpreter
# at small shapes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
BUILD="${LOOM_BUILD_DIR:-build}"
L="$BUILD/loomc"
"$L" emit --all --arch sm_90a -o "$BUILD/ptx"
if "$L" run ikbo_broadcast_add --shape B=2,U=1,M=3,N=5 | grep -q "no GPU here"; then
    echo "no GPU on this machine: running every template on the interpreter at small shapes (the gemm warp-specialized, with its tasks as threads)"
    "$L" run ikbo_broadcast_add --shape B=64,U=3,M=45,N=100,shuffle=1 --interpret
    "$L" run ikbo_broadcast_add --shape B=33,U=33,M=17,N=9,dtype=f32 --interpret
    "$L" run row_softmax --shape R=64,N=1000 --interpret
    "$L" run row_softmax --shape R=16,N=300,dtype=f16 --config BM=4 --interpret
    "$L" run gemm --shape M=77,N=72,K=40,batch=3 --config BM=64,cwarps=4,BN=64 --interpret
else
    for t in $("$L" list); do "$L" run "$t"; done
fi
