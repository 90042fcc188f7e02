#!/usr/bin/env bash
# check_floors.sh -- no include goes up a floor (docs/architecture.md, "Layers").
#
# The library's folders are floors, from the bottom:
#   util < dsl < pipe < codegen < runtime < templates < tune < ops < aot
# and everything else (tools, bench, tests, examples, support) sits on top and may include
# anything.  A file's floor is its folder.  Every `#include "..."` of every .c and .h in
# the floors is resolved as the compiler does -- a path with a '/' from the including
# file's folder, a bare name there first and then in the include directories (include/,
# then the floors) -- and must name a file of the same floor, of a floor below, or a public
# header of include/ (anyone may include those).  Each include of a higher floor's file is
# reported as FILE:LINE; the exit status is 1 when there is any.
#
#   scripts/check_floors.sh [ROOT]     ROOT: the source tree (default: this script's)
set -euo pipefail
ROOT="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$ROOT"

FLOORS=(util dsl pipe codegen runtime templates tune ops aot)
# where a bare name is looked for after the including file's own folder: the include
# directories of the library's targets (CMakeLists.txt), then the other floors
SEARCH=(include dsl codegen runtime templates tune ops aot pipe util)

declare -A RANK
for i in "${!FLOORS[@]}"; do
    RANK[${FLOORS[$i]}]=$i
done

# The folder (first path component under ROOT) of the file an include names, or "" when
# no file of the tree matches.
resolve() {
    local dir=$1 name=$2 p
    if [[ $name == */* ]]; then
        p=$(realpath -m --relative-to=. "$dir/$name")
        [[ -f $p ]] && { echo "${p%%/*}"; return; }
    elif [[ -f $dir/$name ]]; then
        echo "${dir%%/*}"
        return
    fi
    for d in "${SEARCH[@]}"; do
        [[ -f $d/$name ]] && { echo "$d"; return; }
    done
    echo ""
}

bad=0
nfiles=0
for floor in "${FLOORS[@]}"; do
    [[ -d $floor ]] || continue
    while IFS= read -r -d '' f; do
        nfiles=$((nfiles + 1))
        dir=$(dirname "$f")
        while IFS=: read -r line name; do
            to=$(resolve "$dir" "$name")
            [[ -z $to || $to == include ]] && continue
            if [[ -z ${RANK[$to]+x} ]]; then
                echo "$f:$line: includes \"$name\" of $to/, which is no floor of the library"
                bad=1
            elif ((RANK[$to] > RANK[$floor])); then
                echo "$f:$line: includes \"$name\" of $to/, a floor above $floor/ (${FLOORS[*]})"
                bad=1
            fi
        done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' "$f" |
                     sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1:\2/')
    done < <(find "$floor" -type f \( -name '*.c' -o -name '*.h' \) -print0 | sort -z)
done

if ((bad)); then
    echo "check_floors: an include goes up a floor (the order: ${FLOORS[*]}; include/ is open to all)"
    exit 1
fi
echo "check_floors: $nfiles files, every include on its floor or below"
