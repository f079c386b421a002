#!/usr/bin/env python3
"""Accuracy of decision files against the labels of a task split (scripts/make-decision-task.py).

Usage: scripts/score-decisions.py REQUESTS.jsonl NAME=DECISIONS.jsonl [NAME=DECISIONS.jsonl ...] [--json OUT]

REQUESTS carries "answers" per line; each DECISIONS file is `graft decide`'s output for it,
line for line. Prints one column per file: accuracy overall, per record-length bucket (by the
response's usage.record_tokens, the buckets `graft gate` uses) and per question id, with the
majority-answer baseline (always answering the most common label of that question id) beside
them. A line whose response is an error, or whose questions differ from the request's, is an
error. Standard library only.
"""
import collections
import json
import sys


def bucket(tokens):
    return "<=1K" if tokens <= 1000 else "1K-4K" if tokens <= 4000 else "4K-10K" if tokens <= 10000 else ">10K"  # as graft gate


def load(requests_path, decisions_path):
    """[(question id, bucket, correct?)] for one decisions file."""
    out = []
    with open(requests_path) as rq, open(decisions_path) as dc:
        for n, (rline, dline) in enumerate(zip(rq, dc), 1):
            req, resp = json.loads(rline), json.loads(dline)
            if "error" in resp:
                sys.exit(f"{decisions_path} line {n}: error response: {resp['error'].get('message')}")
            got = [d["id"] for d in resp["decisions"]]
            want = [q["id"] for q in req["questions"]]
            if got != want:
                sys.exit(f"{decisions_path} line {n}: questions {got} do not match the request's {want}")
            b = bucket(resp["usage"]["record_tokens"])
            for d in resp["decisions"]:
                out.append((d["id"], b, d["choice"] == req["answers"][d["id"]]))
        if rq.readline() or dc.readline():
            sys.exit(f"{requests_path} and {decisions_path} have different numbers of lines")
    return out


def majority(requests_path, first):
    """The majority-answer baseline, bucketed like the first decisions file."""
    asked = []  # (question id, correct answer) in file order
    with open(requests_path) as rq:
        for line in rq:
            req = json.loads(line)
            asked.extend((q["id"], req["answers"][q["id"]]) for q in req["questions"])
    counts = collections.defaultdict(collections.Counter)
    for qid, ans in asked:
        counts[qid][ans] += 1
    common = {qid: c.most_common(1)[0][0] for qid, c in counts.items()}
    return [(qid, b, common[qid] == ans) for (qid, ans), (_, b, _) in zip(asked, first)]


def main():
    args = [a for a in sys.argv[1:]]
    json_out = None
    if "--json" in args:
        i = args.index("--json")
        json_out = args[i + 1]
        del args[i:i + 2]
    if len(args) < 2 or any("=" not in a for a in args[1:]):
        sys.exit(__doc__)
    requests = args[0]
    columns = [(a.split("=", 1)[0], load(requests, a.split("=", 1)[1])) for a in args[1:]]
    columns.append(("majority", majority(requests, columns[0][1])))
    keys = ["all"] + sorted({b for _, b, _ in columns[0][1]}, key=["<=1K", "1K-4K", "4K-10K", ">10K"].index) + \
           sorted({q for q, _, _ in columns[0][1]})
    table = {}
    for name, rows in columns:
        for key in keys:
            sel = [ok for q, b, ok in rows if key in ("all", q, b)]
            table.setdefault(key, {})[name] = (sum(sel) / len(sel), len(sel))
    width = max(len(k) for k in keys) + 2
    print("accuracy".ljust(width) + "".join(f"{name:>12}" for name, _ in columns) + "   questions")
    for key in keys:
        print(key.ljust(width) + "".join(f"{table[key][name][0]:>12.3f}" for name, _ in columns) +
              f"   {table[key][columns[0][0]][1]}")
    if json_out:
        json.dump({k: {n: {"accuracy": a, "questions": c} for n, (a, c) in v.items()} for k, v in table.items()},
                  open(json_out, "w"), indent=1)


if __name__ == "__main__":
    main()
