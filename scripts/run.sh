#!/usr/bin/env bash
# run.sh -- loom's main job on sensible defaults: set up, build, write PTX for every
# template (build/ptx), then the IKBO linear compression at its headline shape: tuned,
# every stage checked against an independent reference and timed against two
# materialized-broadcast baselines in the same run, loom's own and what frameworks run
# (index_select, cat, cuBLAS; bench/bench_ikbo_lce.c); the IKBO flash attention at its
# headline (B=2048, U=32, S=1024 and 2048, H=2, D=128, n_seed=64), checked against a
# naive f32 attention and timed against the materialized broadcast (bench/bench_ikbo_fa.c);
# then every
# other template with random inputs checked against its plain-C reference, on the GPU
# and on the interpreter.  Without a GPU it says so, runs every IKBO stage on the
# interpreter at a small shape (PTX of its kernels in build/ptx/ikbo_lce), the flash
# attention on the interpreter at small odd shapes, and every template on the interpreter
# at small shapes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
BUILD="${LOOM_BUILD_DIR:-build}"
L="$BUILD/loomc"
"$L" emit --all --arch sm_90a -o "$BUILD/ptx"
mkdir -p "$BUILD/ptx/ikbo_lce"
"$BUILD/bench_ikbo_lce" --ptx "$BUILD/ptx/ikbo_lce"
"$BUILD/bench_ikbo_fa"
if "$L" run ikbo_broadcast_add --shape B=2,U=1,M=3,N=5 | grep -q "no GPU here"; then
    echo "no GPU on this machine: running every template on the interpreter at small shapes (the gemm warp-specialized, with its tasks as threads)"
    "$L" run ikbo_broadcast_add --shape B=64,U=3,M=45,N=100,shuffle=1 --interpret
    "$L" run ikbo_broadcast_add --shape B=33,U=33,M=17,N=9,dtype=f32 --interpret
    "$L" run row_softmax --shape R=64,N=1000 --interpret
    "$L" run row_softmax --shape R=16,N=300,dtype=f16 --config BM=4 --interpret
    "$L" run gemm --shape M=77,N=72,K=40,batch=3 --config BM=64,cwarps=4,BN=64 --interpret
    # the default tiles (the transposed product, pairs of CTAs), then one warp group on 64-row tiles
    "$L" run ikbo_lce --shape B=7,U=3,M=77,N=64,Ku=21,Kc=13,shuffle=1 --config ctas=4 --interpret
    "$L" run ikbo_lce --shape B=7,U=3,M=77,N=64,Ku=21,Kc=13,shuffle=1 --config BM=64,BN=64,stages=2,cwarps=4,ctas=4,consumers=0,trans=0,cluster=1 --interpret
    "$L" run ikbo_fa --shape B=10,U=2,S=200,H=3,D=64,n_seed=64,varlen=1,shuffle=1 --config BN=64,ctas=4 --interpret
else
    # ikbo_lce and ikbo_fa ran above (their default shapes are the headlines, too large for
    # the CPU references); here at small odd shapes
    for t in $("$L" list); do [ "$t" = ikbo_lce ] || [ "$t" = ikbo_fa ] || "$L" run "$t"; done
    "$L" run ikbo_fa --shape B=20,U=3,S=600,H=2,D=128,n_seed=100,varlen=1,shuffle=1
fi
