#!/usr/bin/env python3
"""ncu_stalls.py -- where a kernel's warps wait, from an Nsight Compute report's CSV pages.

    python3 scripts/ncu_stalls.py DETAILS.csv SASS.csv [--top N]

DETAILS.csv is `ncu -i REPORT --page details --csv`, SASS.csv is `ncu -i REPORT --page
source --csv --print-source sass` of a report taken with source counters (`--set full`);
`scripts/gpu.sh profile` makes both and runs this.  Printed:

  - the launch and throughput figures (duration, clocks, registers, shared memory, the
    SM, L2 and DRAM throughputs, issue slots busy);
  - the warp-state samples by reason (long_sb: a wait on a long scoreboard, such as an
    mbarrier try_wait or a global load; barrier: a warp-group or named barrier, wgmma's
    wait among them; wait: a fixed latency; ...);
  - the samples by kind of instruction (tensor-core issue and waits, mbarrier waits, other
    barriers, TMA, global and shared memory, MUFU, the rest);
  - the instructions with the most samples, each with its three largest reasons.

Each sample is one warp at one moment, so a share is of all the warps' time, the
producer's idle waits included: a producer warp that waits for an empty slot while the
consumers compute is not a cost.
"""
import argparse
import collections
import csv
import sys

DETAILS = [
    "Duration", "SM Frequency", "Registers Per Thread", "Dynamic Shared Memory Per Block",
    "Grid Size", "Block Size", "Cluster Size", "Compute (SM) Throughput", "Memory Throughput",
    "L2 Cache Throughput", "DRAM Throughput", "Issue Slots Busy", "Executed Ipc Active",
]

# instruction kinds by their SASS opcode (the first word after a predicate)
KINDS = [
    ("tensor cores (HGMMA/QGMMA issue)", ("HGMMA", "QGMMA", "IGMMA", "HMMA", "QMMA")),
    ("tensor-core waits (WARPGROUP.DEPBAR/ARRIVE)", ("WARPGROUP",)),
    ("mbarrier waits (SYNCS, and the branches of their try_wait loops)", ("SYNCS",)),
    ("named barriers (BAR)", ("BAR",)),
    ("TMA (UTMALDG/UTMASTG/UBLKCP)", ("UTMALDG", "UTMASTG", "UTMACMDFLUSH", "UBLKCP")),
    ("global memory (LDG/STG/RED/ATOM)", ("LDG", "STG", "RED", "ATOM", "ATOMG")),
    ("shared memory (LDS/STS/LDSM/STSM)", ("LDS", "STS", "LDSM", "STSM")),
    ("MUFU (ex2, rcp, ...)", ("MUFU",)),
]


def opcode(text):
    words = text.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def kind_of(op):
    for name, prefixes in KINDS:
        if any(op == p or op.startswith(p + ".") for p in prefixes):
            return name
    return "other"


def details(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return
    hdr = rows[0]
    ix = {h: i for i, h in enumerate(hdr)}
    need = ("Metric Name", "Metric Value", "Metric Unit")
    if any(n not in ix for n in need):
        print(f"{path}: not an ncu --page details --csv file (no {need} columns)", file=sys.stderr)
        return
    seen = {}
    last = max(ix[n] for n in need)
    for r in rows[1:]:
        if len(r) <= last:
            continue
        name = r[ix["Metric Name"]]
        if name in DETAILS and name not in seen:
            seen[name] = f"{r[ix['Metric Value']]} {r[ix['Metric Unit']]}".strip()
    if "Kernel Name" in ix and len(rows) > 1:
        print(f"kernel: {rows[1][ix['Kernel Name']]}")
    for name in DETAILS:
        if name in seen:
            print(f"  {name:34s} {seen[name]}")


def stalls(path, top):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # the first row names the kernel, the second is the header
    start = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if start is None:
        sys.exit(f"{path}: not an ncu --page source --csv --print-source sass file (no Address column)")
    hdr, data = rows[start], [r for r in rows[start + 1:] if len(r) == len(rows[start])]
    ix = {h: i for i, h in enumerate(hdr)}
    col = "Warp Stall Sampling (All Samples)"
    if col not in ix:
        sys.exit(f"{path}: no '{col}' column: take the report with source counters (--set full)")
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]

    def samples(r):
        v = r[ix[col]]
        return int(v) if v.isdigit() else 0

    total = sum(samples(r) for r in data)
    if total == 0:
        sys.exit(f"{path}: no samples")
    print(f"\nwarp samples: {total} over {len(data)} SASS instructions")
    by_reason = collections.Counter()
    for r in data:
        for h in reasons:
            v = r[ix[h]]
            by_reason[h] += int(v) if v.isdigit() else 0
    print("by reason:")
    for h, v in by_reason.most_common(10):
        print(f"  {h[6:]:20s} {100.0 * v / total:5.1f}%")
    by_kind = collections.Counter()
    waitp = None  # the predicate the last mbarrier try_wait set (its loop's branch tests it)
    for r in data:
        text = r[ix["Source"]].strip()
        op, words = opcode(text), text.replace(",", " ").split()
        operands = words[2:] if words and words[0].startswith("@") else words[1:]
        kind = kind_of(op)
        # "@!P0 BRA target" or "BRA !P0, target": a branch on the try_wait's predicate
        tested = words[0].lstrip("@!") if words and words[0].startswith("@") else (operands[0].lstrip("!") if operands else "")
        if op == "BRA" and waitp and tested == waitp:
            kind = KINDS[2][0]
        if op.startswith("SYNCS.PHASECHK") and operands:
            waitp = operands[0]
        elif operands and operands[0] == waitp:  # the predicate written again
            waitp = None
        by_kind[kind] += samples(r)
    print("by instruction kind:")
    for name, v in by_kind.most_common():
        print(f"  {name:66s} {100.0 * v / total:5.1f}%")
    print(f"the {top} instructions with the most samples:")
    for r in sorted(data, key=samples, reverse=True)[:top]:
        s = samples(r)
        if not s:
            break
        why = sorted(((int(r[ix[h]]) if r[ix[h]].isdigit() else 0, h[6:]) for h in reasons), reverse=True)[:3]
        whys = ", ".join(f"{n} {w}" for w, n in why if w)
        print(f"  {100.0 * s / total:5.1f}%  {r[0][-6:]:>6s}  {r[ix['Source']].strip()[:64]:64s}  {whys}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("details", help="ncu --page details --csv output")
    ap.add_argument("sass", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=25, help="instructions to list (default 25)")
    a = ap.parse_args()
    details(a.details)
    stalls(a.sass, a.top)


if __name__ == "__main__":
    main()
