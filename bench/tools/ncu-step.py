#!/usr/bin/env python3
"""Prints the kernels of the last forward step in an Nsight Compute raw CSV.

  ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \\
      build/graft bench ... --decode-steps 3 --decode-batches 1 > step.csv
  bench/tools/ncu-step.py step.csv [--first N]

A step starts at an EmbedKernel launch; the last one in the file is a decode step's (bench runs
its prefill first). One line a kernel (name, grid, microseconds), then the count and the sum.
--first N prints only the first N lines (one layer or two) before the totals.
"""
import argparse
import csv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--first", type=int, default=0)
    args = ap.parse_args()
    lines = open(args.csv).read().splitlines()
    header = [n for n, line in enumerate(lines) if line.startswith('"ID"')]
    if not header:
        raise SystemExit(f"{args.csv}: no ncu CSV header (\"ID\",...) in the file")
    rows = [r for r in csv.DictReader(lines[header[0]:])
            if r.get("gpu__time_duration.sum", "").replace(",", "").replace(".", "").isdigit()]
    starts = [n for n, r in enumerate(rows) if "EmbedKernel" in r["Kernel Name"]]
    if not starts:
        raise SystemExit(f"{args.csv}: no EmbedKernel launch: not a graft forward step")
    step = rows[starts[-1]:]
    total = 0.0
    for n, r in enumerate(step):
        us = float(r["gpu__time_duration.sum"].replace(",", "")) / 1000.0
        total += us
        if not args.first or n < args.first:
            print(f'{r["Kernel Name"][:50]:50s} {r["Grid Size"]:>14s} {us:8.2f}')
    print(f"kernels {len(step)} total us {total:.1f}")


if __name__ == "__main__":
    main()
