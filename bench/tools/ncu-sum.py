#!/usr/bin/env python3
"""Sums the kernel lines of a bench/tools/device-profile summary.txt.

  bench/tools/ncu-sum.py SUMMARY.txt PASS [--by roles|kernel]

--by kernel (default): time per kernel name, longest first, with its share.
--by roles: an adapter pass by role, from the kernel and its neighbour: SumSplitsKernel sums
  the A product's K splits; LoraScatterAddKernel adds the delta into y; a GEMM with more than
  one grid row in y is the A product (split-K); a GEMM followed by a scatter-add is the B
  product; any other GEMM is a base projection. Count, time, share and the time-weighted SM
  throughput of each role.
"""
import argparse
import collections
import re
import sys

UNITS = {"ms": 1000.0, "us": 1.0, "ns": 0.001}


def kernels(path, want):
    """(name with grid, microseconds, grid rows in y, SM %) for each line of pass `want`."""
    rows = []
    for line in open(path):
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 4 or parts[0] != want or len(parts[2].split()) != 2:
            continue
        value, unit = parts[2].split()
        grid = re.search(r"\((\d+), (\d+), (\d+)\)x", parts[1])
        sm = float(parts[3].split()[1].rstrip("%")) if len(parts[3].split()) > 1 else 0.0
        rows.append((parts[1], float(value) * UNITS.get(unit, 0.0), int(grid.group(2)) if grid else 1, sm))
    return rows


def role(rows, i):
    name, _, grid_y, _ = rows[i]
    following = rows[i + 1][0] if i + 1 < len(rows) else ""
    if "SumSplits" in name:
        return "A: sum of the K splits"
    if "LoraScatter" in name:
        return "scatter-add into y"
    if grid_y > 1:
        return "A product (split-K)"
    if "LoraScatter" in following:
        return "B product"
    return "base projection"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("summary")
    ap.add_argument("pass_name", metavar="PASS")
    ap.add_argument("--by", choices=["roles", "kernel"], default="kernel")
    args = ap.parse_args()
    rows = kernels(args.summary, args.pass_name)
    if not rows:
        sys.exit(f"no '{args.pass_name}' lines in {args.summary}")
    groups = collections.OrderedDict()
    for i, (name, us, _, sm) in enumerate(rows):
        key = role(rows, i) if args.by == "roles" else name.split("(")[0].strip()
        g = groups.setdefault(key, [0, 0.0, 0.0])
        g[0] += 1
        g[1] += us
        g[2] += sm * us
    total = sum(g[1] for g in groups.values())
    print(f"{'role' if args.by == 'roles' else 'kernel':26s} {'count':>7s} {'time':>10s} {'share':>6s} {'SM':>6s}")
    for key, (n, us, smt) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{key:26s} {n:7d} {us / 1000:8.2f}ms {100 * us / total:5.1f}% {smt / us if us else 0:5.1f}%")
    if args.by == "roles" and groups.get("base projection", [0, 0.0])[1] > 0:
        base = groups["base projection"][1]
        print(f"adapter kernels / base projections: {(total - base) / base:.2f}")


if __name__ == "__main__":
    main()
