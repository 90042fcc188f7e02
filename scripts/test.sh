#!/usr/bin/env bash
# test.sh -- check the floors' includes (scripts/check_floors.sh), set up, build, and run
# every test that runs without a GPU (and the GPU tests too, where there is one): PTX for
# every template assembled with ptxas for sm_90a, the Criterion suite, the fuzzers' seed
# corpora; then the Criterion suite again in a build with ASan + UBSan (build-asan; leaks
# checked), and each fuzzer under libFuzzer for a bounded time (build-fuzz, clang).  About
# 21 minutes on 2 cores from scratch (session 18).
#
#   LOOM_TEST_SANITIZE=0   skip the sanitizer build and its run
#   LOOM_TEST_FUZZ=0       skip the libFuzzer build and runs
#   LOOM_FUZZ_SECONDS      seconds each fuzzer runs (default 45)
#   LOOM_TEST_INSTALL=0    skip the install test (cmake --install, tests/install against it)
#   LOOM_TEST_AOT=0        the install test skips loom_add_aot's target (loomc aot)
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== floors: no include goes up a floor (scripts/check_floors.sh)"
bash scripts/check_floors.sh
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

echo "== bench_obvious --interpret: issue 36's kernels written the obvious way, checked on the interpreter; their PTX through ptxas"
# about 2 s: the kernels at small shapes against their references, their cost reports (no
# conversion), and the GPU shapes' PTX without spills
log=$("$BUILD/bench_obvious" --interpret --ptx "$BUILD/ptx/obvious" 2>&1) || { echo "$log"; echo "bench_obvious failed"; exit 1; }
echo "$log" | grep -E "^  (check|=>)"
if command -v ptxas >/dev/null; then
    for f in "$BUILD"/ptx/obvious/*.ptx; do
        log=$(ptxas -arch=sm_90a -v "$f" -o /dev/null 2>&1) || { echo "$log"; echo "ptxas failed on $f"; exit 1; }
        if echo "$log" | grep "bytes spill" | grep -vq " 0 bytes spill stores, 0 bytes spill loads"; then
            echo "$log"; echo "spills in $f"; exit 1
        fi
    done
fi

echo "== bench_examples --interpret: the example plugin's templates checked on the interpreter, the gather's cost report"
log=$("$BUILD/bench_examples" --interpret 2>&1) || { echo "$log"; echo "bench_examples failed"; exit 1; }
echo "$log" | grep -E "^  (gemm|rmsnorm|ikbo|  =>)"

echo "== examples/aot: lce_aot, built from loomc aot's files alone (no libloom, LLVM or libcuda)"
# the generated code's own names start with aot_ (static) and lce_ (its API): none is loom_
LCE_AOT="$BUILD/examples/aot/lce_aot"
[ -x "$LCE_AOT" ] || { echo "$LCE_AOT was not built"; exit 1; }
bad=$(nm "$LCE_AOT" | grep -E "loom_|llvm|LLVM" || true)
[ -z "$bad" ] || { echo "$bad" | head; echo "lce_aot has loom or LLVM symbols"; exit 1; }
bad=$(ldd "$LCE_AOT" | grep -E "libloom|libcuda|libLLVM" || true)
[ -z "$bad" ] || { echo "$bad"; echo "lce_aot links libloom, LLVM or libcuda"; exit 1; }
# no GPU: it says so and exits 0; with one it checks and times the LCE headline
log=$("$LCE_AOT" 2>&1) || { echo "$log"; echo "lce_aot failed"; exit 1; }
echo "$log" | grep -E "^(no GPU|aot lce|check|lce_aot: ok)"

echo "== loomc aot's files of every template (built into loom_tests), with gcc and clang -Werror, linked without loom"
# the generated C must be plain C11: no GNU mode, every warning an error, both compilers
command -v clang >/dev/null || { apt-get update -qq && apt-get install -y -qq clang >/dev/null; }
AOTC="$BUILD/aot_test"
printf '%s\n' "#include <stdio.h>" "const char *ta_gemm_last_error(void);" "void ta_gemm_unload(void);" \
    "int main(void) { ta_gemm_unload(); printf(\"linked: '%s'\\n\", ta_gemm_last_error()); return 0; }" >"$AOTC/main.c"
for cc in gcc clang; do
    objs=()
    for f in "$AOTC"/ta_*.c; do
        "$cc" -std=c11 -Wall -Wextra -Werror -O1 -c "$f" -o "${f%.c}.$cc.o" || { echo "$cc failed on $f"; exit 1; }
        objs+=("${f%.c}.$cc.o")
    done
    "$cc" -std=c11 "$AOTC/main.c" "${objs[@]}" -ldl -lpthread -o "$AOTC/main.$cc" || { echo "$cc: linking the AOT files failed"; exit 1; }
    "$AOTC/main.$cc" >/dev/null || { echo "the AOT files linked by $cc do not run"; exit 1; }
    ! nm "$AOTC/main.$cc" | grep -q " [TU] loom_" || { echo "$cc: the AOT files need loom symbols"; exit 1; }
    echo "$cc: ${#objs[@]} generated files compiled with -Werror and linked without loom"
done

echo "== fuzzers' seed corpora (tests/fuzz/corpus), as plain programs"
FUZZERS=(builder codegen tune_cache module_cache loomc_args)
for f in "${FUZZERS[@]}"; do
    "$BUILD/fuzz_$f" "tests/fuzz/corpus/$f" 2>"$BUILD/fuzz_$f.log" || { cat "$BUILD/fuzz_$f.log"; echo "fuzz_$f failed on its corpus"; exit 1; }
done

# Sanitizer reports: a test's child process that leaks or trips ASan after its assertions
# passed is not a Criterion failure, so the log is searched too.  Criterion's own runner
# leaks a descriptor at exit (scripts/lsan.supp).
SAN_ENV=(ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=0
         LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp:print_suppressions=0
         UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
san_clean() {
    if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$1"; then
        grep -B2 -A30 -E "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$1" | head -120
        echo "sanitizer report in $1"; return 1
    fi
}
LLVM_CONFIG="/usr/lib/llvm-${LOOM_LLVM:-19}/bin/llvm-config"
JOBS="$(nproc)"; [ "$JOBS" -gt 2 ] || JOBS=2

if [ "${LOOM_TEST_SANITIZE:-1}" != 0 ]; then
    ASAN="${LOOM_ASAN_BUILD_DIR:-build-asan}"
    echo "== Criterion tests with ASan + UBSan ($ASAN)"
    t0=$SECONDS
    cmake -S . -B "$ASAN" -DLOOM_SANITIZE=ON -DLOOM_LLVM_CONFIG="$LLVM_CONFIG" >/dev/null
    cmake --build "$ASAN" -j"$JOBS" --target loom_tests "${FUZZERS[@]/#/fuzz_}" >/dev/null
    log="$ASAN/loom_tests.log"
    rc=0
    # the error model's random sweep (320 shapes in the plain run above) at 80 shapes here
    env "${SAN_ENV[@]}" LOOM_TEST_SWEEP=20 LOOM_CACHE_DIR="$(cd "$ASAN" && pwd)/cache" "$ASAN/loom_tests" -j2 >"$log" 2>&1 || rc=$?
    grep -v "ASan doesn't fully support makecontext" "$log" | tail -3
    [ $rc -eq 0 ] || { grep -E "\[FAIL\]|CRASH|signal" "$log" | head -40; echo "sanitizer suite failed"; exit 1; }
    san_clean "$log"
    for f in "${FUZZERS[@]}"; do
        env "${SAN_ENV[@]}" "$ASAN/fuzz_$f" "tests/fuzz/corpus/$f" >"$ASAN/fuzz_$f.log" 2>&1 \
            || { tail -40 "$ASAN/fuzz_$f.log"; echo "fuzz_$f failed on its corpus under ASan"; exit 1; }
        san_clean "$ASAN/fuzz_$f.log"
    done
    echo "sanitizer build and suite: clean ($((SECONDS - t0)) s)"
fi

if [ "${LOOM_TEST_FUZZ:-1}" != 0 ]; then
    FUZZ="${LOOM_FUZZ_BUILD_DIR:-build-fuzz}"
    SECS="${LOOM_FUZZ_SECONDS:-45}"
    echo "== fuzzers under libFuzzer, ${SECS} s each ($FUZZ)"
    t0=$SECONDS
    # clang and its libFuzzer runtime, installed when missing (as scripts/setup.sh does)
    if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
            clang -x c -fsanitize=fuzzer,address - -o /tmp/loom-fuzz-probe.$$ 2>/dev/null; then
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        $SUDO apt-get update -qq
        extra=(); apt-cache show libclang-rt-dev >/dev/null 2>&1 && extra=(libclang-rt-dev)
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang "${extra[@]}" >/dev/null
    fi
    rm -f /tmp/loom-fuzz-probe.$$
    CC=clang cmake -S . -B "$FUZZ" -DLOOM_FUZZ=ON -DLOOM_LLVM_CONFIG="$LLVM_CONFIG" >/dev/null
    cmake --build "$FUZZ" -j"$JOBS" --target "${FUZZERS[@]/#/fuzz_}" >/dev/null
    for f in "${FUZZERS[@]}"; do
        # new inputs go to a working corpus in the build dir, never into the repository's
        work="$FUZZ/corpus/$f"
        mkdir -p "$work"
        log="$FUZZ/fuzz_$f.log"
        rc=0
        ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 timeout $((SECS + 120)) \
            "$FUZZ/fuzz_$f" -max_total_time="$SECS" -timeout=20 -rss_limit_mb=2560 -print_final_stats=1 \
            -artifact_prefix="$FUZZ/$f-" "$work" "tests/fuzz/corpus/$f" >"$log" 2>&1 || rc=$?
        runs=$(grep -o "stat::number_of_executed_units: [0-9]*" "$log" | awk '{print $2}')
        if [ $rc -ne 0 ]; then
            grep -v "^#" "$log" | tail -60
            echo "fuzz_$f failed (exit $rc; a crash, leak or hang): the input is $(ls "$FUZZ/$f-"* 2>/dev/null | head -1)"
            exit 1
        fi
        echo "fuzz_$f: ${runs:-?} inputs, no crash, leak or hang"
    done
    echo "fuzzers: done ($((SECONDS - t0)) s)"
fi

if [ "${LOOM_TEST_INSTALL:-1}" != 0 ]; then
    # what a user's project gets: `cmake --install` into a scratch prefix, then tests/install
    # built against it with find_package(loom) and with pkg-config, and run; LOOM_TEST_AOT=1
    # also builds its loom_add_aot target (loomc aot at build time)
    echo "== cmake --install, and a project using the installed loom (tests/install)"
    t0=$SECONDS
    INST="$PWD/$BUILD/install-test"
    rm -rf "$INST"
    cmake --install "$BUILD" --prefix "$INST/prefix" >"$INST.log" 2>&1 || { cat "$INST.log"; echo "cmake --install failed"; exit 1; }
    for f in bin/loomc include/loom.h include/loom_runtime.h include/loom_hopper.h include/loom_tune.h \
             include/loom_aot.h include/loom_gemm.h include/loom_ikbo.h include/loom_pipe.h include/loom_pipe_epilogue.h; do
        [ -e "$INST/prefix/$f" ] || { echo "not installed: $f"; exit 1; }
    done
    [ -z "$(find "$INST/prefix" -name "libloom_static*" -o -name "libloom_support*")" ] \
        || { echo "test libraries installed"; exit 1; }
    "$INST/prefix/bin/loomc" list | grep -qx gemm || { echo "installed loomc list: no gemm"; exit 1; }
    AOT=OFF; [ "${LOOM_TEST_AOT:-1}" != 0 ] && AOT=ON
    cmake -S tests/install -B "$INST/cmake" -DCMAKE_PREFIX_PATH="$INST/prefix" -DLOOM_TEST_AOT=$AOT >>"$INST.log" 2>&1 \
        && cmake --build "$INST/cmake" -j"$JOBS" >>"$INST.log" 2>&1 || { tail -40 "$INST.log"; echo "tests/install failed to build"; exit 1; }
    "$INST/cmake/install_user"
    [ $AOT = OFF ] || "$INST/cmake/aot_user"
    PC_DIR=$(dirname "$(find "$INST/prefix" -name loom.pc | head -1)")
    # shellcheck disable=SC2046
    cc -std=c11 -Wall -Wextra -Werror tests/install/install_user.c \
        $(PKG_CONFIG_PATH="$PC_DIR" pkg-config --cflags --libs loom) -o "$INST/pc_user"
    LD_LIBRARY_PATH="$(PKG_CONFIG_PATH="$PC_DIR" pkg-config --variable=libdir loom)" "$INST/pc_user" >/dev/null
    echo "install: loomc, find_package and pkg-config users ok ($((SECONDS - t0)) s)"

    # a user's kernels as a plugin (examples/kernels, docs/kernels.md) built against the
    # installed loom, each template through the installed loomc --plugin: PTX at its default
    # shape assembled by ptxas (no spills), a check on the interpreter at a small shape, loomc
    # tune there, and (LOOM_TEST_AOT) loomc aot's files at two shapes compiled with gcc -Werror
    echo "== examples/kernels: a plugin built against the installed loom, through loomc --plugin"
    t0=$SECONDS
    cmake -S examples/kernels -B "$INST/kernels" -DCMAKE_PREFIX_PATH="$INST/prefix" >>"$INST.log" 2>&1 \
        && cmake --build "$INST/kernels" -j"$JOBS" >>"$INST.log" 2>&1 || { tail -40 "$INST.log"; echo "examples/kernels failed to build"; exit 1; }
    PLUGIN="$INST/kernels/libloom_kernels.so"
    LOOMC=("$INST/prefix/bin/loomc")
    [ "$("${LOOMC[@]}" list --plugin "$PLUGIN" | tail -4 | tr '\n' ' ')" = "rmsnorm gemm_bias_act gemm_plain ikbo_gather_softmax " ] \
        || { echo "installed loomc list --plugin: not rmsnorm, gemm_bias_act, gemm_plain and ikbo_gather_softmax last"; exit 1; }
    declare -A small=([rmsnorm]="R=8,N=1000,dtype=f16" [gemm_bias_act]="M=96,N=72,K=136,act=2"
                      [gemm_plain]="M=96,N=72,K=136" [ikbo_gather_softmax]="B=13,U=4,S=37,D=40,shuffle=1")
    declare -A small2=([rmsnorm]="R=64,N=96,dtype=f32" [gemm_bias_act]="M=128,N=128,K=64,act=1"
                       [gemm_plain]="M=256,N=512,K=256" [ikbo_gather_softmax]="B=300,U=20,S=64,D=32,dtype=f32")
    for t in rmsnorm gemm_bias_act gemm_plain ikbo_gather_softmax; do
        "${LOOMC[@]}" emit --plugin "$PLUGIN" "$t" -o "$INST/$t.ptx" >/dev/null || { echo "loomc emit $t failed"; exit 1; }
        if command -v ptxas >/dev/null; then
            log=$(ptxas -arch=sm_90a -v "$INST/$t.ptx" -o /dev/null 2>&1) || { echo "$log"; echo "ptxas failed on $t"; exit 1; }
            if echo "$log" | grep "bytes spill" | grep -vq " 0 bytes spill stores, 0 bytes spill loads"; then
                echo "$log"; echo "spills in $t"; exit 1
            fi
        fi
        log=$("${LOOMC[@]}" run --plugin "$PLUGIN" "$t" --shape "${small[$t]}" --interpret 2>&1) \
            || { echo "$log"; echo "loomc run $t --interpret failed"; exit 1; }
        echo "$log"
        # tuned at that shape (without a GPU: the default config, the tuner says why)
        "${LOOMC[@]}" tune --plugin "$PLUGIN" "$t" --shape "${small[$t]}" >/dev/null 2>&1 \
            || { echo "loomc tune $t failed"; exit 1; }
        if [ $AOT = ON ]; then
            "${LOOMC[@]}" aot --plugin "$PLUGIN" "$t" --shape "${small[$t]}" --shape "${small2[$t]}" --prefix "k_$t" \
                -o "$INST/kernels_aot" >/dev/null || { echo "loomc aot $t failed"; exit 1; }
            gcc -std=c11 -Wall -Wextra -Werror -O1 -c "$INST/kernels_aot/k_$t.c" -o "$INST/kernels_aot/k_$t.o" \
                || { echo "gcc failed on loomc aot's k_$t.c"; exit 1; }
        fi
    done
    echo "examples/kernels: rmsnorm, gemm_bias_act, gemm_plain and ikbo_gather_softmax emitted, checked and written" \
         "ahead of time" \
         "($((SECONDS - t0)) s)"
fi
