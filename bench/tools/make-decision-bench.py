#!/usr/bin/env python3
"""Decision files for `graft bench --decisions`: records of a chosen length in log lines, four
questions each (three of single-token choices, one of three multi-token choices: six runs).

Usage:
  bench/tools/make-decision-bench.py OUT.jsonl --lines N [--count K] [--shared] [--seed S]

Records are scripts/make-decision-task.py's web-server logs cut or extended to N lines (about
90 tokens a line with the demo tokenizer, which splits digits: 45 lines is ~4K tokens, 335
~30K). --count K writes K requests; --shared gives all K the first record (the prefix cache's
case), otherwise each has its own. Standard library only; the same arguments give the same file.
"""
import importlib.util
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "task", os.path.join(HERE, "..", "..", "scripts", "make-decision-task.py"))
task = importlib.util.module_from_spec(spec)
spec.loader.exec_module(task)

QUESTIONS = ["malicious", "server_errors", "first_method", "clients"]


def record(rng, lines):
    out = []
    while len(out) < lines:
        out += task.make_record(rng)
    return out[:lines]


def request(rng, lines):
    qs = {q[0]: q for q in task.questions(lines, rng)}
    # task.questions draws a random subset; ask again until the four named ones are all there.
    while not all(k in qs for k in QUESTIONS):
        qs.update({q[0]: q for q in task.questions(lines, rng)})
    return {
        "instructions": "You are a security analyst. Answer each question about the web server log with one of the choices.",
        "record": "\n".join(lines),
        "questions": [{"id": k, "question": qs[k][1], "choices": qs[k][2]} for k in QUESTIONS],
    }


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-") or "--lines" not in args:
        sys.exit(__doc__)
    out = args[0]
    lines = int(args[args.index("--lines") + 1])
    count = int(args[args.index("--count") + 1]) if "--count" in args else 1
    seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 11
    if lines < 1 or count < 1:
        sys.exit("--lines and --count must be at least 1")
    rng = random.Random(seed)
    first = record(rng, lines)
    with open(out, "w") as f:
        for i in range(count):
            rec = first if (i == 0 or "--shared" in args) else record(rng, lines)
            f.write(json.dumps(request(rng, rec), ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
