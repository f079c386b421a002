#!/usr/bin/env python3
"""A synthetic but realistic decision task: web-server access logs and multiple-choice
questions whose answers follow from the log (some from one line, some from the whole record).

Usage:
  scripts/make-decision-task.py OUTDIR [--records 1200] [--seed 7]
  scripts/make-decision-task.py --check OUTDIR     (re-derive every answer from its record)

Writes OUTDIR/{train,validation,test}.jsonl (80/10/10). Each line is a decisions request body
(docs/design.md §4) plus "answers": {question id: correct choice}. Records run from 2 to 190
log lines (about 200 to 17K tokens with the demo tokenizer, which splits digits); each has 5-12 questions drawn from the
templates below. Standard library only; the same seed gives the same files.
"""
import json
import os
import random
import sys

METHODS = ["GET", "GET", "GET", "GET", "POST", "POST", "PUT", "DELETE"]
STATIC = ["/index.html", "/css/site.css", "/js/app.js", "/img/logo.png", "/favicon.ico", "/about", "/contact"]
API = ["/api/v1/users", "/api/v1/orders", "/api/v1/search", "/api/v1/items/{n}", "/api/v2/login", "/api/v1/cart"]
ADMIN = ["/admin", "/admin/users", "/admin/settings", "/wp-admin/", "/phpmyadmin/"]
SQLI = ["?id=1' OR '1'='1", "?q=1 UNION SELECT password FROM users--", "?user=admin'--", "?id=1;DROP TABLE orders"]
XSS = ["?q=<script>alert(1)</script>", "?name=<img src=x onerror=alert(1)>", "?c=javascript:alert(document.cookie)"]
TRAVERSAL = ["?file=../../../../etc/passwd", "?path=..%2f..%2fwindows%2fwin.ini"]
BROWSERS = ["Mozilla/5.0 (X11; Linux x86_64)", "Mozilla/5.0 (Windows NT 10.0; Win64; x64)", "Googlebot/2.1",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0)"]
TOOLS = ["sqlmap/1.7", "curl/8.4.0", "python-requests/2.31"]
STATUS_NORMAL = [200] * 12 + [301, 304, 404]


def ip(rng):
    return f"{rng.choice([10, 172, 192, 203, 198])}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def make_record(rng):
    n = int(rng.choice([rng.randint(2, 30), rng.randint(30, 110), rng.randint(110, 190)]))
    clients = [ip(rng) for _ in range(rng.randint(1, 6))]
    attack = rng.choice([None, None, "sqli", "xss", "traversal", "scan"])
    failing = rng.random() < 0.3
    admin_visits = rng.random() < 0.3   # some records touch the admin pages, most do not
    scripted = rng.random() < 0.15      # a benign script (curl / python) among the clients
    lines = []
    hour, minute, second = rng.randint(0, 22), rng.randint(0, 59), rng.randint(0, 59)
    for i in range(n):
        second += rng.randint(0, 20)
        minute += second // 60
        second %= 60
        hour += minute // 60
        minute %= 60
        kind = rng.random()
        path = rng.choice(STATIC) if kind < 0.5 else rng.choice(API) if (kind < 0.95 or not admin_visits) else rng.choice(ADMIN)
        path = path.replace("{n}", str(rng.randint(1, 9999)))
        method = rng.choice(METHODS) if path.startswith("/api") else "GET"
        status = rng.choice(STATUS_NORMAL)
        if path.startswith(("/admin", "/wp-admin", "/phpmyadmin")):
            status = rng.choice([401, 403, 404, 200])
        client = rng.choice(clients)
        agent = rng.choice(BROWSERS) if not (scripted and rng.random() < 0.3) else rng.choice(TOOLS[1:])
        probe_rate = 0.45 if attack == "scan" else 0.15
        if attack and rng.random() < probe_rate:
            payload = {"sqli": SQLI, "xss": XSS, "traversal": TRAVERSAL}.get(attack)
            if payload:
                path += rng.choice(payload)
                status = rng.choice([400, 403, 200, 500])
            else:  # scan: many 404s for odd paths
                path = rng.choice(["/.env", "/.git/config", "/backup.zip", "/config.php", "/server-status"])
                status = 404
            agent = rng.choice(TOOLS)
        if failing and rng.random() < 0.1:
            status = rng.choice([500, 502, 503])
        size = 0 if status in (304, 204) else rng.randint(120, 48000)
        ms = rng.randint(2, 40) if status < 500 else rng.randint(800, 30000)
        lines.append(f'{client} - - [12/Mar/2026:{hour % 24:02d}:{minute:02d}:{second:02d} +0000] "{method} {path} HTTP/1.1" '
                     f'{status} {size} "{agent}" {ms}ms')
    return lines


def parse(line):
    client = line.split(" ", 1)[0]
    req = line.split('"')[1]
    method, path = req.split(" ")[0], req.split(" ")[1]
    status = int(line.split('"')[2].split()[0])
    agent = line.split('"')[3]
    return client, method, path, status, agent


def count_bucket(n):
    return "fewer than 20" if n < 20 else "20 to 100" if n <= 100 else "more than 100"


def questions(lines, rng):
    rows = [parse(l) for l in lines]
    clients = sorted({r[0] for r in rows})
    statuses = [r[3] for r in rows]
    paths = [r[2] for r in rows]
    low = lambda p: p.lower()
    has_sqli = any(("'" in p and ("or" in low(p) or "--" in p)) or "union select" in low(p) or "drop table" in low(p) for p in paths)
    has_xss = any("<script" in low(p) or "onerror=" in low(p) or "javascript:" in low(p) for p in paths)
    has_trav = any("../" in p or "..%2f" in low(p) for p in paths)
    scan = sum(1 for p, s in zip(paths, statuses) if s == 404 and p in ("/.env", "/.git/config", "/backup.zip", "/config.php", "/server-status"))
    category = "sqli" if has_sqli else "xss" if has_xss else "path traversal" if has_trav else "scanning" if scan >= 2 else "none"
    qs = [
        ("malicious", "Does any request in this log look like an attack?", ["yes", "no"], "yes" if category != "none" else "no"),
        ("category", "Which kind of attack does the log show?", ["sqli", "xss", "path traversal", "scanning", "none"], category),
        ("server_errors", "Did the server answer any request with a 5xx status?", ["yes", "no"],
         "yes" if any(s >= 500 for s in statuses) else "no"),
        ("admin", "Was an administration page requested?", ["yes", "no"],
         "yes" if any(p.startswith(("/admin", "/wp-admin", "/phpmyadmin")) for p in paths) else "no"),
        ("clients", "How many distinct client addresses appear?", ["one", "two or three", "four or more"],
         "one" if len(clients) == 1 else "two or three" if len(clients) <= 3 else "four or more"),
        ("volume", "How many requests does the log hold?", ["fewer than 20", "20 to 100", "more than 100"], count_bucket(len(rows))),
        ("first_method", "What is the HTTP method of the first request?", ["GET", "POST", "PUT", "DELETE"], rows[0][1]),
        ("last_status", "What status class did the last request get?", ["2xx", "3xx", "4xx", "5xx"], f"{rows[-1][3] // 100}xx"),
        ("tool", "Was any request sent by an automated tool (sqlmap, curl, python-requests)?", ["yes", "no"],
         "yes" if any(a.startswith(("sqlmap", "curl", "python-requests")) for a in (r[4] for r in rows)) else "no"),
        ("not_found", "Is 404 the most frequent status?", ["yes", "no"],
         "yes" if max(set(statuses), key=lambda s: (statuses.count(s), -s)) == 404 else "no"),
    ]
    # One-line questions about a client picked from the record.
    c = rng.choice(clients)
    first = next(r for r in rows if r[0] == c)
    qs.append(("client_first_method", f"What method did {c} use first?", ["GET", "POST", "PUT", "DELETE"], first[1]))
    qs.append(("client_first_status", f"What status class did the first request of {c} get?", ["2xx", "3xx", "4xx", "5xx"],
               f"{first[3] // 100}xx"))
    rng.shuffle(qs)
    return qs[: rng.randint(5, 12)]


def example(rng):
    lines = make_record(rng)
    qs = questions(lines, rng)
    body = {
        "instructions": "You are a security analyst. Answer each question about the web server log with one of the choices.",
        "record": "\n".join(lines),
        "questions": [{"id": q[0], "question": q[1], "choices": q[2]} for q in qs],
        "answers": {q[0]: q[3] for q in qs},
    }
    return body


def check(outdir):
    n = 0
    for split in ("train", "validation", "test"):
        for line in open(os.path.join(outdir, f"{split}.jsonl")):
            ex = json.loads(line)
            lines = ex["record"].split("\n")
            ids = [q["id"] for q in ex["questions"]]
            assert 5 <= len(ids) <= 12 and len(set(ids)) == len(ids), ids
            for q in ex["questions"]:
                assert ex["answers"][q["id"]] in q["choices"], (q, ex["answers"])
            # Re-derive what does not depend on the random question draw.
            rows = [parse(l) for l in lines]
            if "volume" in ex["answers"]:
                assert ex["answers"]["volume"] == count_bucket(len(rows))
            if "first_method" in ex["answers"]:
                assert ex["answers"]["first_method"] == rows[0][1]
            n += 1
    print(f"checked {n} records")


def main():
    args = sys.argv[1:]
    if args and args[0] == "--check":
        check(args[1])
        return
    outdir = args[0]
    records = int(args[args.index("--records") + 1]) if "--records" in args else 1200
    seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 7
    rng = random.Random(seed)
    os.makedirs(outdir, exist_ok=True)
    examples = [example(rng) for _ in range(records)]
    n_train, n_val = int(records * 0.8), int(records * 0.1)
    splits = {"train": examples[:n_train], "validation": examples[n_train:n_train + n_val], "test": examples[n_train + n_val:]}
    for name, exs in splits.items():
        with open(os.path.join(outdir, f"{name}.jsonl"), "w") as f:
            for ex in exs:
                f.write(json.dumps(ex, ensure_ascii=False) + "\n")
    sizes = sorted(len(e["record"]) for e in examples)
    print(f"{records} records ({', '.join(f'{k} {len(v)}' for k, v in splits.items())}); record bytes "
          f"min {sizes[0]} median {sizes[len(sizes) // 2]} max {sizes[-1]}")


if __name__ == "__main__":
    main()
