#!/usr/bin/env python3
"""Sums an adapter ncu pass (scripts/device-profile's summary.txt lines) by role.

  scripts/ncu-adapter-roles.py SUMMARY.txt [PASS]     (PASS default: adapter-prefill)

Roles, from the kernel and its neighbour: SumSplitsKernel sums the A product's K splits;
LoraScatterAddKernel adds the delta into y; a GEMM with more than one grid row in y is the A
product (split-K); a GEMM followed by a scatter-add is the B product; any other GEMM is a base
projection. Prints count, time, share and the time-weighted SM throughput of each role.
"""
import re
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    want = sys.argv[2] if len(sys.argv) > 2 else "adapter-prefill"
    rows = []
    for line in open(sys.argv[1]):
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 4 or parts[0] != want:
            continue
        value, unit = parts[2].split()
        us = float(value) * {"ms": 1000.0, "us": 1.0, "ns": 0.001}[unit]
        grid = re.search(r"\((\d+), (\d+), (\d+)\)x", parts[1])
        sm = float(parts[3].split()[1].rstrip("%"))
        rows.append((parts[1], us, int(grid.group(2)) if grid else 1, sm))
    if not rows:
        sys.exit(f"no '{want}' lines in {sys.argv[1]}")
    roles = {}
    for i, (name, us, grid_y, sm) in enumerate(rows):
        following = rows[i + 1][0] if i + 1 < len(rows) else ""
        if "SumSplits" in name:
            role = "A: sum of the K splits"
        elif "LoraScatter" in name:
            role = "scatter-add into y"
        elif grid_y > 1:
            role = "A product (split-K)"
        elif "LoraScatter" in following:
            role = "B product"
        else:
            role = "base projection"
        r = roles.setdefault(role, [0, 0.0, 0.0])
        r[0] += 1
        r[1] += us
        r[2] += sm * us
    total = sum(r[1] for r in roles.values())
    print(f"{'role':26s} {'kernels':>7s} {'time':>10s} {'share':>6s} {'SM':>6s}")
    for role, (n, us, smt) in sorted(roles.items(), key=lambda kv: -kv[1][1]):
        print(f"{role:26s} {n:7d} {us / 1000:8.2f}ms {100 * us / total:5.1f}% {smt / us:5.1f}%")
    base = roles.get("base projection", [0, 0.0, 0.0])[1]
    if base > 0:
        print(f"adapter kernels / base projections: {(total - base) / base:.2f}")


if __name__ == "__main__":
    main()
