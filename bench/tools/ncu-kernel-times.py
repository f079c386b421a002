#!/usr/bin/env python3
"""Median and minimum time of each (kernel, grid) in an Nsight Compute raw CSV.

  ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \\
      --kernel-name regex:'GdnCore' build/graft bench ... > k.csv
  bench/tools/ncu-kernel-times.py k.csv

One line per kernel name (its last 30 characters before the argument list) and grid size: the
launch count, the median and the minimum in microseconds. Lines before the CSV header (ncu's and
the program's own output) are skipped, as is the header's units row.
"""
import collections
import csv
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    lines = open(sys.argv[1], encoding="utf-8", errors="replace").read().splitlines()
    start = [n for n, line in enumerate(lines) if line.startswith('"ID"')]
    if not start:
        print(f"ncu-kernel-times: no CSV header (\"ID\",...) in {sys.argv[1]}", file=sys.stderr)
        return 1
    times = collections.defaultdict(list)
    for row in csv.DictReader(lines[start[0]:]):
        value = row.get("gpu__time_duration.sum", "").replace(",", "")
        if not value.replace(".", "").isdigit():
            continue  # the units row
        key = (row["Kernel Name"].split("(")[0][-30:], row["Grid Size"])
        times[key].append(float(value) / 1000.0)
    for (name, grid), us in sorted(times.items()):
        us.sort()
        print(f"  {name:30s} {grid:>14s} n={len(us):3d} median {us[len(us) // 2]:8.2f} us  min {us[0]:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
