#!/usr/bin/env bash
# scripts/ptx_identical.sh BEFORE AFTER -- does a change leave the generated code alone?
#
# BEFORE and AFTER are two loomc binaries (or the build folders holding them: DIR/loomc),
# typically a build of the base commit and one of the change.  Each emits `loomc emit --all`
# (every template at its defaults), the same with the hang check on (LOOM_HANG_CHECK), and
# the fixed set of non-default configs and shapes below, and every PTX file of the one is
# compared byte for byte (cmp) with the other's.
# Prints one line per difference or failed emit and exits 1 if there is any, 0 when every
# file is identical, 2 on a usage error.  KEEP=1 keeps the emitted files (their folder is
# printed).
#
#   cmake --build /tmp/b-base -j2 --target loomc     # the base commit's tree
#   cmake --build /tmp/b-mine -j2 --target loomc
#   scripts/ptx_identical.sh /tmp/b-base /tmp/b-mine
#
# The cases cover what --all does not: gemm's ping-pong and split consumers, the epilogue
# from registers (tmastore=0), clusters sharing B (and A, batched), BK=32 with bf16 in and
# f32 out, a batch with A batched too; ikbo_lce untransposed (split, and one consumer
# task), other stages, bf16, N=64; ikbo_fa varlen with D=64, the claimed schedule with
# turns, tmastore=0 with BN=64, xunit; row_softmax and ikbo_broadcast_add at other tiles
# and dtypes.  `loomc show NAME` lists a template's keys.
set -u

usage() {
    echo "usage: $0 BEFORE AFTER   (each a loomc binary or a build folder holding one)" >&2
    exit 2
}
[ $# -eq 2 ] || usage
loomc_of() {
    if [ -d "$1" ]; then echo "$1/loomc"; else echo "$1"; fi
}
BEFORE=$(loomc_of "$1")
AFTER=$(loomc_of "$2")
for b in "$BEFORE" "$AFTER"; do
    [ -x "$b" ] || { echo "$0: no loomc at $b" >&2; usage; }
done

# NAME|CONFIG|SHAPE (either may be empty)
CASES=(
    "gemm|consumers=1,cwarps=8|"
    "gemm|consumers=2,cwarps=8,BM=128|"
    "gemm|tmastore=0|"
    "gemm|cluster=2|"
    "gemm|tmastore=0,cluster=2|"
    "gemm|cluster=2,share=1|batch=4"
    "gemm|BK=32,stages=8|dtype=bf16,odtype=f32"
    "gemm||batch=4,ashared=0"
    "ikbo_lce|trans=0,cluster=1,BM=128|"
    "ikbo_lce|trans=0,cluster=1,consumers=0,cwarps=4,BM=128|"
    "ikbo_lce|stages=2|"
    "ikbo_lce|stages=3,cluster=1|"
    "ikbo_lce||dtype=bf16"
    "ikbo_lce||N=64"
    "ikbo_fa||varlen=1,D=64"
    "ikbo_fa|sched=1,turns=1|"
    "ikbo_fa|tmastore=0,BN=64|"
    "ikbo_fa|xunit=1|"
    "row_softmax|BM=2,warps=8|"
    "row_softmax||dtype=f16,N=4096"
    "ikbo_broadcast_add|BM=16,warps=8|"
    "ikbo_broadcast_add||dtype=bf16"
)

OUT=$(mktemp -d "${TMPDIR:-/tmp}/ptx_identical.XXXXXX") || exit 2
if [ "${KEEP:-0}" = 1 ]; then
    echo "emitted files kept in $OUT"
else
    trap 'rm -rf "$OUT"' EXIT
fi

bad=0
# emit SIDE FILE NAME CONFIG SHAPE: one case with one side's loomc
emit() {
    local bin="$BEFORE"
    [ "$1" = after ] && bin="$AFTER"
    local args=(emit "$3")
    [ -n "$4" ] && args+=(--config "$4")
    [ -n "$5" ] && args+=(--shape "$5")
    if ! "$bin" "${args[@]}" -o "$OUT/$1/$2" >/dev/null 2>"$OUT/$1/$2.err"; then
        echo "FAILED ($1): loomc ${args[*]}: $(head -c 300 "$OUT/$1/$2.err")"
        return 1
    fi
}

for side in before after; do
    mkdir -p "$OUT/$side"
    bin="$BEFORE"
    [ "$side" = after ] && bin="$AFTER"
    if ! "$bin" emit --all -o "$OUT/$side/all" >/dev/null 2>"$OUT/$side/all.err"; then
        echo "FAILED ($side): loomc emit --all: $(head -c 300 "$OUT/$side/all.err")"
        bad=1
    fi
    # the hang check's bounded waits and their reports (codegen.h), in every template
    if ! LOOM_HANG_CHECK=1000 "$bin" emit --all -o "$OUT/$side/all_hang" >/dev/null 2>"$OUT/$side/all_hang.err"; then
        echo "FAILED ($side): LOOM_HANG_CHECK=1000 loomc emit --all: $(head -c 300 "$OUT/$side/all_hang.err")"
        bad=1
    fi
    for c in "${CASES[@]}"; do
        IFS='|' read -r name config shape <<<"$c"
        # the file names the case: NAME_config_CONFIG_shape_SHAPE.ptx
        emit "$side" "${name}_config_${config:-default}_shape_${shape:-default}.ptx" "$name" "$config" "$shape" || bad=1
    done
done

# every file of either side: present in both and identical
n=0
while IFS= read -r f; do
    n=$((n + 1))
    if [ ! -f "$OUT/before/$f" ] || [ ! -f "$OUT/after/$f" ]; then
        echo "MISSING: $f (only one side has it)"
        bad=1
    elif ! cmp -s "$OUT/before/$f" "$OUT/after/$f"; then
        echo "DIFFERS: $f ($(cmp "$OUT/before/$f" "$OUT/after/$f" 2>&1 | head -1 | sed 's/.* differ: //'))"
        bad=1
    fi
done < <(cd "$OUT" && find before after -name '*.ptx' | sed 's|^[^/]*/||' | sort -u)

if [ "$bad" = 0 ]; then
    echo "identical: $n PTX files (emit --all, with and without the hang check, and ${#CASES[@]} configs)"
    exit 0
fi
echo "NOT identical (see above)"
exit 1
