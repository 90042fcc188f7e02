#!/usr/bin/env bash
# gpu.sh -- every GPU test and benchmark in one call.
#
#   bash scripts/gpu.sh pack    here (the build machine): build, then put the binaries,
#                               libloom.so (LLVM linked in statically) and the shared
#                               libraries Criterion needs into .gpu/ (git-ignored)
#   bash scripts/gpu.sh run     on the GPU machine (Ubuntu + CUDA driver, no LLVM or
#                               Criterion): unpack .gpu/, run the GPU tests, every template
#                               on the GPU and the interpreter, the benchmarks, and end with
#                               a short table.  Logs go to $OUT (or /tmp/loom-out).
#   bash scripts/gpu.sh profile KERNEL CMD [ARGS...]
#                               on the GPU machine: unpack .gpu/, run CMD (a program of the
#                               pack: bench_gemm, loomc, ...) under Nsight Compute, profile
#                               one launch of the kernel whose name matches the regex KERNEL
#                               (after LOOM_GPU_PROF_SKIP others, default 3) with source-level
#                               stall sampling (--set full), and print where its warps wait
#                               (scripts/ncu_stalls.py); the report and its CSV pages go to
#                               $OUT (profile.ncu-rep, profile.details.csv, profile.sass.csv).
#                               One profiled launch replays the kernel about 40 times.
#
# Knobs of `run` (to spend less GPU time on a part):
#   LOOM_GPU_TARBALL   the pack to run (default .gpu/loom.tar.xz)
#   LOOM_GPU_TESTS     a Criterion --filter for the tests (default: every test)
#   LOOM_GPU_BENCHES   benchmarks to run, by name (default: every bench_*; "none" for none).
#                      bench_serving (the IKBO LCE request stream) runs twice on one cache:
#                      cold (an empty cache: its prepare tunes and compiles, about 4 minutes
#                      on an H100) and warm (a second process: the prepare reads the cache)
#   LOOM_GPU_TEMPLATES 0 skips the template runs
#   LOOM_GPU_CUBINS    how many cached cubins to read with cuobjdump (default 60)
#   LOOM_GPU_GEMM_ARGS arguments of bench_gemm (default none: its shapes, default config)
#   LOOM_GPU_IKBO_ARGS arguments of bench_ikbo_lce (default --sweep: the headline, then the
#                      B and ratio sweeps)
#   LOOM_GPU_FA_ARGS   arguments of bench_ikbo_fa (default --sweep --fp8: the sweep, then issue
#                      38's FP8 rows at the headline beside the f16 kernel, with the targets)
#   LOOM_GPU_EXAMPLES_ARGS arguments of bench_examples (default none: each example template's
#                      default config; --tuned: the tuner's pick, timed now or cached)
#   LOOM_GPU_TUNE_ARGS arguments of bench_tune (default --exhaustive: every template tuned at
#                      its headline, "NOT TUNED" when it fell back, the pick against the
#                      exhaustive best)
#   LOOM_GPU_IKBO_FP8  0 skips `bench_ikbo_lce --fp8` (issue 38: the LCE with e4m3 weights and
#                      embeddings beside the f16 LCE at the headline, K padded to 16)
#   LOOM_GPU_GRID      0 skips issue 21's tables: `bench_ikbo_lce --grid` (the framework
#                      against loom's pick) and `bench_gemm --odd --grid --config tuned`
#                      (gemm at odd and small or skinny shapes against cuBLAS); about 70 s
#                      (the LCE grid, default config) and 4 minutes (cold tuning cache) on an H100
#   LOOM_GPU_PLAIN     0 skips issue 42's table: `bench_gemm` at 4096^3 and 8192^3 f16, the plain
#                      tile-loop GEMM beside the gemm template's defaults (about 30 s on an H100)
#   LOOM_GPU_TEST_VERBOSE  1: the tests with --verbose (their cr_log_info lines)
#   LOOM_GPU_TEST_JOBS how many tests run at once (default 1: the timed ones see a quiet GPU;
#                      8 finishes in about two minutes on an H100)
#   LOOM_GPU_AOT       0 skips examples/aot/lce_aot (the LCE headline from loomc aot's files)
#   LOOM_GPU_TORCH     0 skips tests/torch/test_loom_torch.py (loomc aot --torch's ops: eager,
#                      torch.compile, CUDA graphs, and their bench; runs where torch imports)
#   LOOM_GPU_SANITIZE  0 skips compute-sanitizer (memcheck, racecheck, synccheck over every
#                      template at two small shapes, each IKBO LCE stage included)
set -uo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"

if [ "$mode" = pack ]; then
    set -e
    bash scripts/setup.sh >/dev/null
    rm -rf .gpu && mkdir -p .gpu/stage/bin .gpu/stage/lib
    B="${LOOM_BUILD_DIR:-build}"
    cp "$B"/libloom.so .gpu/stage/lib/
    for f in "$B"/loomc "$B"/loom_tests "$B"/bench_* "$B"/ikbo_broadcast_add "$B"/vector_add "$B"/row_softmax "$B"/matmul \
             "$B"/examples/aot/lce_aot; do
        [ -f "$f" ] && cp "$f" .gpu/stage/bin/
    done
    # the plugin tests' plugins (tests/test_plugin.c looks beside loom_tests)
    [ -d "$B"/test_plugins ] && cp -r "$B"/test_plugins .gpu/stage/bin/
    # an earlier loom's benchmarks, to compare with in the same run (LOOM_GPU_BEFORE=its build dir)
    if [ -n "${LOOM_GPU_BEFORE:-}" ]; then
        for b in ${LOOM_GPU_BEFORE_BENCHES:-bench_gemm bench_ikbo_lce}; do
            cp "$LOOM_GPU_BEFORE/$b" ".gpu/stage/bin/${b}_before"
        done
    fi
    # Criterion and its libraries (not on the GPU machine); glibc's own stay behind
    ldd "$B"/loom_tests | awk '/=> \//{print $3}' | grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
        grep -v libloom | while read -r lib; do cp -L "$lib" .gpu/stage/lib/; done
    strip --strip-unneeded .gpu/stage/lib/*.so* .gpu/stage/bin/* 2>/dev/null || true
    # one dictionary over the whole pack: the static benches share their copy of LLVM with libloom
    tar -C .gpu/stage -cf - . | xz -T2 --lzma2=preset=1,dict=256MiB >.gpu/loom.tar.xz
    rm -rf .gpu/stage
    ls -la .gpu/
    exit 0
fi

if [ "$mode" != run ] && { [ "$mode" != profile ] || [ $# -lt 3 ]; }; then
    echo "usage: bash scripts/gpu.sh pack|run|profile KERNEL CMD [ARGS...]" >&2
    exit 2
fi

OUTDIR="${OUT:-/tmp/loom-out}"
mkdir -p "$OUTDIR"
R=/tmp/loom-gpu
rm -rf "$R" && mkdir -p "$R" && tar -C "$R" -xJf "${LOOM_GPU_TARBALL:-.gpu/loom.tar.xz}" || exit 1
export LD_LIBRARY_PATH="$R/lib:${LD_LIBRARY_PATH:-}"
export PATH="$R/bin:$PATH:/usr/local/cuda/bin"
export LOOM_CACHE_DIR=/tmp/loom-cache
rm -rf "$LOOM_CACHE_DIR"

if [ "$mode" = profile ]; then
    kernel="$2"
    shift 2
    command -v ncu >/dev/null || { echo "gpu.sh profile: no ncu (Nsight Compute) on this machine" >&2; exit 1; }
    rm -f "$OUTDIR/profile.ncu-rep"
    # from a scratch directory, as the tests run; the program's own output in profile.log
    (mkdir -p "$R/cwd" && cd "$R/cwd" &&
        timeout "${LOOM_GPU_PROF_TIMEOUT:-300}" ncu -k "regex:$kernel" -s "${LOOM_GPU_PROF_SKIP:-3}" -c 1 --set full \
            --import-source no -o "$OUTDIR/profile" "$@") >"$OUTDIR/profile.log" 2>&1
    rc=$?
    if [ ! -f "$OUTDIR/profile.ncu-rep" ]; then
        tail -20 "$OUTDIR/profile.log"
        echo "gpu.sh profile: no launch of a kernel matching '$kernel' was profiled (ncu rc $rc; the log: $OUTDIR/profile.log)" >&2
        exit 1
    fi
    ncu -i "$OUTDIR/profile.ncu-rep" --page details --csv >"$OUTDIR/profile.details.csv" &&
        ncu -i "$OUTDIR/profile.ncu-rep" --page source --csv --print-source sass >"$OUTDIR/profile.sass.csv" &&
        python3 scripts/ncu_stalls.py "$OUTDIR/profile.details.csv" "$OUTDIR/profile.sass.csv"
    exit $?
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUTDIR/gpu.txt"

echo "== GPU tests (Criterion)"
filter=()
[ -n "${LOOM_GPU_TESTS:-}" ] && filter=(--filter "$LOOM_GPU_TESTS")
# from a scratch directory outside the repository: the suite reads nothing from the source
# tree (the golden files are built into loom_tests), so it passes from the pack anywhere
mkdir -p "$R/cwd"
# (a test's time limit: 400 s; with 8 at once the GPU tests that check against CPU references
# in double take up to 140 s on an H100 host)
(cd "$R/cwd" && timeout 900 loom_tests -j"${LOOM_GPU_TEST_JOBS:-1}" --timeout 400 "${filter[@]}" ${LOOM_GPU_TEST_VERBOSE:+--verbose}) 2>&1 |
    tee "$OUTDIR/tests.log" | grep -E "FAIL|CRASH|Synthesis|skipp" | tail -40

echo "== every template on the GPU and on the interpreter"
[ "${LOOM_GPU_TEMPLATES:-1}" = 0 ] || for spec in "ikbo_broadcast_add --shape B=300,U=7,M=433,N=256,shuffle=1" \
            "ikbo_broadcast_add --shape B=77,U=5,M=45,N=100,dtype=f32" \
            "ikbo_broadcast_add --shape B=64,U=64,M=33,N=37,dtype=bf16" \
            "row_softmax --shape R=300,N=1000" \
            "row_softmax --shape R=129,N=4096,dtype=f16 --config BM=1,warps=8" \
            "row_softmax --shape R=64,N=77,dtype=bf16 --config BM=4" \
            "gemm --shape M=300,N=200,K=136 --config ctas=0" \
            "gemm --shape M=433,N=256,K=872,batch=6,dtype=bf16,odtype=f32,ashared=0 --config BN=128,stages=3" \
            "gemm --shape M=77,N=72,K=40,batch=3 --config BM=64,cwarps=4,BN=64" \
            "ikbo_fa --shape B=20,U=3,S=600,H=2,D=128,n_seed=100,varlen=1,shuffle=1" \
            "ikbo_fa --shape B=16,U=16,S=500,H=3,D=64,n_seed=64 --config BN=64,stages=4,turns=1"; do
    echo "-- loomc run $spec"
    timeout 300 loomc run $spec 2>&1
done 2>&1 | tee "$OUTDIR/templates.log"

echo "== examples/aot/lce_aot: the IKBO LCE headline from loomc aot's files alone (no libloom)"
[ "${LOOM_GPU_AOT:-1}" = 0 ] || { timeout 300 lce_aot; echo "lce_aot rc=$?"; } 2>&1 | tee "$OUTDIR/lce_aot.log"

echo "== tests/torch/test_loom_torch.py: loom's operations as PyTorch custom ops (loomc aot --torch)"
if [ "${LOOM_GPU_TORCH:-1}" != 0 ] && python3 -c 'import torch' 2>/dev/null; then
    rm -rf /tmp/loom-torch
    { timeout 900 python3 tests/torch/test_loom_torch.py --loomc "$R/bin/loomc" --dir /tmp/loom-torch; echo "test_loom_torch rc=$?"; } 2>&1 |
        tee "$OUTDIR/torch.log"
else
    echo "skipped: torch does not import here (or LOOM_GPU_TORCH=0)" | tee "$OUTDIR/torch.log"
fi

echo "== compute-sanitizer: memcheck, racecheck, synccheck over every template at small shapes"
# each line: a command on the GPU (loomc run also checks the interpreter; bench_ikbo_lce runs
# every LCE stage and the framework baseline at a small shape with a given config)
san_specs=("loomc run ikbo_broadcast_add --shape B=30,U=7,M=45,N=100,shuffle=1"
           "loomc run ikbo_broadcast_add --shape B=9,U=9,M=17,N=9,dtype=f32"
           "loomc run row_softmax --shape R=64,N=300"
           "loomc run row_softmax --shape R=16,N=1000,dtype=f16 --config BM=4"
           "loomc run gemm --shape M=77,N=72,K=40,batch=3 --config BM=64,cwarps=4,BN=64"
           "loomc run gemm --shape M=300,N=200,K=136 --config consumers=1,BM=128,cwarps=8,BN=128"
           "bench_ikbo_lce --shape B=20,U=3,M=77,N=64,Ku=21,Kc=13 --config BM=256,BN=128,stages=4,cwarps=8,ctas=8,consumers=2,trans=1,cluster=2"
           "bench_ikbo_lce --shape B=33,U=33,M=130,N=72,Ku=64,Kc=40 --config BM=128,BN=128,stages=3,cwarps=8,ctas=6,consumers=2,trans=0,cluster=1"
           "loomc run ikbo_fa --shape B=6,U=2,S=200,H=2,D=128,n_seed=64,varlen=1,shuffle=1"
           "loomc run ikbo_fa --shape B=5,U=5,S=130,H=1,D=64,n_seed=3 --config BN=64,turns=1,tmastore=0"
           "loomc run ikbo_lce --shape B=20,U=3,M=77,N=64,Ku=21,Kc=13 --config ctas=8"
           "loomc run ikbo_lce --shape B=33,U=33,M=130,N=72,Ku=64,Kc=40 --config BM=128,stages=3,ctas=6,trans=0,cluster=1")
[ "${LOOM_GPU_SANITIZE:-1}" = 0 ] || for tool in memcheck racecheck synccheck; do
    for spec in "${san_specs[@]}"; do
        # every stage (bench_ikbo_lce, whose timing loops racecheck makes take minutes) under
        # memcheck; the stage-4 kernel alone (loomc run ikbo_lce) under all three
        [ "$tool" != memcheck ] && [[ "$spec" == bench_* ]] && continue
        [ "$tool" = memcheck ] && [[ "$spec" == "loomc run ikbo_lce"* ]] && continue
        log="$OUTDIR/sanitize.$tool.log"
        echo "-- $tool: $spec" >>"$log"
        timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 $spec >>"$log" 2>&1
        rc=$?
        errs=$(grep -o -E "(ERROR|RACECHECK) SUMMARY: [0-9]* (error|hazard)" "$log" | tail -1)
        echo "$tool rc=$rc ${errs:-no summary}: $spec"
    done
done 2>&1 | tee "$OUTDIR/sanitize.log"

benches="${LOOM_GPU_BENCHES:-}"
for b in "$R"/bin/bench_*; do
    [ -x "$b" ] || continue
    [[ "$b" == *_before ]] && continue # run right before its current one, below
    [ -z "$benches" ] || [[ " $benches " == *" $(basename "$b") "* ]] || continue
    args=()
    [ "$(basename "$b")" = bench_ikbo_lce ] && args=(${LOOM_GPU_IKBO_ARGS---sweep})
    [ "$(basename "$b")" = bench_gemm ] && args=(${LOOM_GPU_GEMM_ARGS-})
    [ "$(basename "$b")" = bench_tune ] && args=(${LOOM_GPU_TUNE_ARGS---exhaustive})
    [ "$(basename "$b")" = bench_ikbo_fa ] && args=(${LOOM_GPU_FA_ARGS---sweep --fp8})
    [ "$(basename "$b")" = bench_examples ] && args=(${LOOM_GPU_EXAMPLES_ARGS-})
    # issue 36: bench_obvious runs its PyTorch peer (torch.compile) in the same run where torch imports
    [ "$(basename "$b")" = bench_obvious ] && python3 -c 'import torch' 2>/dev/null && args=(--torch "$PWD/bench/torch_obvious.py")
    for v in "${b}_before" "$b"; do
        [ -x "$v" ] || continue
        echo "== $(basename "$v")"
        LOOM_CACHE_DIR="$LOOM_CACHE_DIR/$(basename "$v")" timeout 900 "$v" "${args[@]}" 2>&1 | tee "$OUTDIR/$(basename "$v").log"
        # the request stream again, a fresh process on the cache the first run filled: the warm start
        if [ "$(basename "$b")" = bench_serving ]; then
            echo "== $(basename "$v") (warm: a second process on the first one's cache)"
            LOOM_CACHE_DIR="$LOOM_CACHE_DIR/$(basename "$v")" timeout 300 "$v" "${args[@]}" 2>&1 | tee "$OUTDIR/$(basename "$v")_warm.log"
        fi
    done
done

# issue 38 item 6: the FP8 LCE beside the f16 LCE at the headline (a second invocation:
# --fp8 is a mode of its own)
if [ "${LOOM_GPU_IKBO_FP8:-1}" != 0 ] && [ -x "$R/bin/bench_ikbo_lce" ] &&
    { [ -z "$benches" ] || [[ " $benches " == *" bench_ikbo_lce "* ]]; }; then
    echo "== bench_ikbo_lce --fp8"
    LOOM_CACHE_DIR="$LOOM_CACHE_DIR/bench_ikbo_lce" timeout 900 "$R/bin/bench_ikbo_lce" --fp8 2>&1 |
        tee "$OUTDIR/bench_ikbo_lce_fp8.log"
fi
if [ "${LOOM_GPU_GRID:-1}" != 0 ] && [ -x "$R/bin/bench_ikbo_lce" ] &&
    { [ -z "$benches" ] || [[ " $benches " == *" bench_ikbo_lce "* ]]; }; then
    echo "== bench_ikbo_lce --grid"
    LOOM_CACHE_DIR="$LOOM_CACHE_DIR/bench_ikbo_lce" timeout 900 "$R/bin/bench_ikbo_lce" --grid 2>&1 | tee "$OUTDIR/bench_ikbo_lce_grid.log" |
        sed -n '/== grid:/,$p'
fi
if [ "${LOOM_GPU_GRID:-1}" != 0 ] && [ -x "$R/bin/bench_gemm" ] &&
    { [ -z "$benches" ] || [[ " $benches " == *" bench_gemm "* ]]; }; then
    echo "== bench_gemm --odd --grid --config tuned"
    LOOM_CACHE_DIR="$LOOM_CACHE_DIR/bench_gemm" timeout 600 "$R/bin/bench_gemm" --odd --grid --ms 150 --config tuned 2>&1 |
        tee "$OUTDIR/bench_gemm_grid.log" | sed -n '/^shape/,$p'
fi

# issue 42: the plain tile-loop GEMM (examples/kernels/plain.c at gemm_plain's defaults)
# beside the gemm template's defaults and cuBLAS, interleaved in one table
if [ "${LOOM_GPU_PLAIN:-1}" != 0 ] && [ -x "$R/bin/bench_gemm" ] &&
    { [ -z "$benches" ] || [[ " $benches " == *" bench_gemm "* ]]; }; then
    echo "== bench_gemm: the plain GEMM beside the gemm template (issue 42)"
    LOOM_CACHE_DIR="$LOOM_CACHE_DIR/bench_gemm" timeout 300 "$R/bin/bench_gemm" --only 4096^3,8192^3 --dtype f16 --ms 100 \
        --config "" --config plain:bm=128,bn=256,bk=64,consumers=2,stages=4,group=8 2>&1 |
        tee "$OUTDIR/bench_gemm_plain.log" | sed -n '/^shape/,$p'
fi

echo "== the disk cache's cubins: registers and setmaxnreg kept (cuobjdump)"
# a cache file is a 64-byte header, u32 ntma, ntma 52-byte TMA records, then the cubin
find "$LOOM_CACHE_DIR" -name "*.cubin" | head -"${LOOM_GPU_CUBINS:-60}" | while read -r f; do
    [ -f "$f" ] || continue
    python3 -c 'import sys,struct; d=open(sys.argv[1],"rb").read(); n=struct.unpack_from("<I",d,64)[0]; open(sys.argv[2],"wb").write(d[68+52*n:])' "$f" /tmp/loom-k.elf || continue
    fn=$(cuobjdump -res-usage /tmp/loom-k.elf 2>/dev/null | grep -o "Function [^:]*" | head -1 | cut -c10-)
    [ -n "$fn" ] || continue # a PTX image (no ptxas): nothing to read
    regs=$(cuobjdump -res-usage /tmp/loom-k.elf 2>/dev/null | grep -o "REG:[0-9]*" | head -1)
    echo "$fn $regs SETMAXREG:$(cuobjdump -sass /tmp/loom-k.elf 2>/dev/null | grep -c SETMAXREG) spill:$(cuobjdump -res-usage /tmp/loom-k.elf | grep -o 'STACK:[0-9]*' | head -1)"
done 2>&1 | sort | uniq -c | sort -rn | head -40 | tee "$OUTDIR/cubins.log"

echo
echo "================ summary ($(head -1 "$OUTDIR/gpu.txt"))"
grep -h "Synthesis" "$OUTDIR/tests.log" | sed 's/^/tests: /'
[ -f "$OUTDIR/sanitize.log" ] && echo "compute-sanitizer: $(grep -c 'rc=0 ' "$OUTDIR/sanitize.log") of $(grep -c 'rc=' "$OUTDIR/sanitize.log") runs clean" &&
    grep -v "rc=0 " "$OUTDIR/sanitize.log" | sed 's/^/  /'
[ -f "$OUTDIR/templates.log" ] && grep -h -E ": (ok|FAIL) on" "$OUTDIR/templates.log" | sed 's/^/  /'
[ -f "$OUTDIR/bench_compile.log" ] && sed -n '2,$p' "$OUTDIR/bench_compile.log"
[ -f "$OUTDIR/bench_launch.log" ] && sed -n '/^bench_launch/,$p' "$OUTDIR/bench_launch.log"
# issue 18's table: this run's figures beside its goals; Triton's and torch's are quoted from
# issue 18 (an H100 host), not measured here
if [ -f "$OUTDIR/bench_compile.log" ] || [ -f "$OUTDIR/bench_tune.log" ] || [ -f "$OUTDIR/bench_launch.log" ]; then
    echo "start-up (issue 18)                     loom, this run                     peer                                goal"
    c="$OUTDIR/bench_compile.log"
    if [ -f "$c" ]; then
        awk '/[|]/ && $1=="ikbo_lce" && $2+0>0 {printf "%-39s %-34s %-35s %s\n", "cold compile, ikbo_lce default", $2" ms (codegen "$4", link "$5")", "Triton 1,794 ms (quoted)", "<= 250 ms"}' "$c"
        awk '/[|]/ && ($1=="ikbo_broadcast_add"||$1=="row_softmax") {if ($2+0>m) m=$2+0} END {if (m>0) printf "%-39s %-34s %-35s %s\n", "cold compile, small templates (max)", m" ms", "-", "<= 50 ms"}' "$c"
        awk '/[|]/ && ($1=="ikbo_lce"||$1=="gemm") && $2+0>0 {printf "%-39s %-34s %-35s %s\n", "warm start, "$1" (disk cache)", $(NF-1)" ms", "-", "<= 5 ms"}' "$c"
    fi
    t="$OUTDIR/bench_tune.log"
    [ -f "$t" ] && awk '$1=="ikbo_lce" && $6=="|" {printf "%-39s %-34s %-35s %s\n", "tuning ikbo_lce, cold", $7" ms, "$5" of "$3" configs timed", "Triton 41.7 s, 64 configs (quoted)", "<= 3 s, >= 32 configs"; printf "%-39s %-34s %-35s %s\n", "tuning ikbo_lce, warm", $12" ms ("$13")", "-", "<= 20 ms"; if ($18+0>0) printf "%-39s %-34s %-35s %s\n", "tuning ikbo_lce, pick / exhaustive best", $16" / "$17" ms ("$18")", "-", "within 3%"}' "$t"
    l="$OUTDIR/bench_launch.log"
    [ -f "$l" ] && awk '/^loom_launch_stream/ {loom=$2} /^cuLaunchKernelEx/ {raw=$3} END {if (loom != "") printf "%-39s %-34s %-35s %s\n", "launch, host cost (median)", "loom_launch_stream "loom" us", "raw cuLaunchKernelEx "raw" us (this run); Triton 19.5, torch eager 13.5 (quoted)", "<= 3 us, within 1 us of raw"}' "$l"
fi
[ -f "$OUTDIR/bench_bandwidth.log" ] && sed -n '/^kernel (best config)/,$p' "$OUTDIR/bench_bandwidth.log"
[ -f "$OUTDIR/bench_obvious.log" ] && sed -n '/^kernel (written the obvious way)/,$p' "$OUTDIR/bench_obvious.log"
[ -f "$OUTDIR/bench_examples.log" ] && sed -n '/^example  /,$p' "$OUTDIR/bench_examples.log"
[ -f "$OUTDIR/bench_gemm_before.log" ] && echo "bench_gemm before:" && sed -n '/^(MxNxKxbatch/,$p' "$OUTDIR/bench_gemm_before.log"
[ -f "$OUTDIR/bench_gemm.log" ] && sed -n '/^(MxNxKxbatch/,$p' "$OUTDIR/bench_gemm.log"
[ -f "$OUTDIR/bench_tune.log" ] && sed -n '/^template .*configs/,$p' "$OUTDIR/bench_tune.log"
[ -f "$OUTDIR/cubins.log" ] && grep -E "SETMAXREG:[1-9]" "$OUTDIR/cubins.log" | head -8 | sed 's/^/cubin with setmaxnreg: /'
[ -f "$OUTDIR/bench_ikbo_lce_before.log" ] && echo "bench_ikbo_lce before:" && grep -E "^B=|framework|stage [0-4]|FAIL" "$OUTDIR/bench_ikbo_lce_before.log" | head -40
[ -f "$OUTDIR/bench_ikbo_lce.log" ] && grep -E "^B=|framework|stage [0-4]|FAIL" "$OUTDIR/bench_ikbo_lce.log" | head -40
# issue 38 item 6: the FP8 LCE's rows (f16 and e4m3 stages 3, 4 and auto, checked), the error against f16
[ -f "$OUTDIR/bench_ikbo_lce_fp8.log" ] && grep -E "^FP8|^  (f16|e4m3) |FAIL" "$OUTDIR/bench_ikbo_lce_fp8.log" | cut -c1-300
[ -f "$OUTDIR/bench_aot.log" ] && sed -n '/^bench_aot/,$p' "$OUTDIR/bench_aot.log"
[ -f "$OUTDIR/torch.log" ] && grep -E "^(FAIL|bench |skipped|test_loom_torch)" "$OUTDIR/torch.log" | sed 's/^/torch ops: /'
[ -f "$OUTDIR/lce_aot.log" ] && grep -E "^(aot lce|check|no GPU)|FAIL|rc=" "$OUTDIR/lce_aot.log" | sed 's/^/lce_aot: /'
[ -f "$OUTDIR/bench_ikbo_fa.log" ] && sed -n '/^config/,$p' "$OUTDIR/bench_ikbo_fa.log" | grep -v "^FP8" | cut -c1-150 | head -40
# issue 38 item 5: FP8 attention at the headline, beside f16, the targets met or not, each output checked
[ -f "$OUTDIR/bench_ikbo_fa.log" ] && grep -E "^FP8" "$OUTDIR/bench_ikbo_fa.log" | cut -c1-400
# the request stream: cold and warm starts, the request path's compiles, the checks; the warm run's table
for f in "$OUTDIR/bench_serving.log" "$OUTDIR/bench_serving_warm.log"; do
    [ -f "$f" ] && grep -E "^(loom prepare|request path|checks: [0-9]+ requests,|bench_serving: (ok|FAILED))" "$f" | cut -c1-300 | sed "s/^/$(basename "$f" .log): /"
done
[ -f "$OUTDIR/bench_serving_warm.log" ] && sed -n '/requests   loom p50/,/^  all /p' "$OUTDIR/bench_serving_warm.log"
[ -f "$OUTDIR/bench_ikbo_lce_grid.log" ] && sed -n '/== grid:/,$p' "$OUTDIR/bench_ikbo_lce_grid.log"
[ -f "$OUTDIR/bench_gemm_grid.log" ] && sed -n '/^shape/,$p' "$OUTDIR/bench_gemm_grid.log" | cut -c1-100
# issue 42: the plain kernels against the templates they stand for (targets 0.95x, 0.9x, 0.85x)
[ -f "$OUTDIR/bench_gemm_plain.log" ] && sed -n '/^shape/,$p' "$OUTDIR/bench_gemm_plain.log" |
    awk '$8=="defaults" {t[$1]=$3} $8 ~ /^plain:/ && t[$1] > 0 {printf "plain GEMM %s f16: %.1f TF/s, %.3fx of the gemm template (%.1f) (target 0.95x)\n", $1, $3, $3 / t[$1], t[$1]}'
[ -f "$OUTDIR/bench_autows.log" ] && grep -E "^(lce:|fa S=)" "$OUTDIR/bench_autows.log"
exit 0
