#!/usr/bin/env python3
"""Calibration text for `graft adapter extract --calibration` on the demo task: the first
--records records of the task generator's *training* split (scripts/make-decision-task.py with
the demo model's training seed, 7) as plain text — instructions, the record, each question with
its choices as JSON — so that the inputs the fit sees look like the decisions it serves, without
touching the records any gate evaluates (fixtures/demo-gate: other seeds' test splits).

    scripts/make-calibration-text.py OUT.txt [--records 60] [--seed 7]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--records", type=int, default=60)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as t:
        subprocess.run([sys.executable, os.path.join(here, "make-decision-task.py"), t, "--records",
                        str(max(a.records * 2, 20)), "--seed", str(a.seed)], check=True, stdout=subprocess.DEVNULL)
        n = 0
        with open(os.path.join(t, "train.jsonl")) as f, open(a.out, "w") as o:
            for line in f:
                if n >= a.records:
                    break
                d = json.loads(line)
                o.write(d["instructions"] + "\n\n" + d["record"] + "\n\n")
                for q in d["questions"]:
                    o.write(json.dumps(q) + "\n")
                o.write("\n")
                n += 1
    if n < a.records:
        sys.exit(f"make-calibration-text: only {n} training records (asked for {a.records})")
    print(f"{a.out}: {n} training records (seed {a.seed})")


if __name__ == "__main__":
    main()
