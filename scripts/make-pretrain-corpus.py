#!/usr/bin/env python3
"""Collects shippable pretraining text for the demo base model: the plain-text documentation
Debian installs under /usr/share/doc (copyright files, READMEs, NEWS, *.md, *.txt; gzip
decompressed), in sorted path order, each file cut at 64 KiB, up to --max-mb in all.

Usage: scripts/make-pretrain-corpus.py OUT.txt.xz [--max-mb 16] [--root /usr/share/doc]

The text depends on the packages installed on the machine that runs it; the sha256 of the
result is printed so that a training report can name the corpus it used.
"""
import gzip
import hashlib
import lzma
import os
import re
import sys

KEEP = re.compile(r"^(copyright|README.*|NEWS.*|.*\.md|.*\.txt)(\.gz)?$")


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    out, root, budget = sys.argv[1], arg("--root", "/usr/share/doc"), arg("--max-mb", 16) * 1_000_000
    parts, total, files = [], 0, 0
    for dirpath, dirnames, names in os.walk(root):
        dirnames.sort()
        for name in sorted(names):
            path = os.path.join(dirpath, name)
            if not KEEP.match(name) or os.path.islink(path):
                continue
            try:
                raw = (gzip.open if name.endswith(".gz") else open)(path, "rb").read(65536)
            except OSError as e:
                print(f"skipped {path}: {e}", file=sys.stderr)
                continue
            text = raw.decode("utf-8", errors="replace").replace("\x00", "")
            if total + len(text) > budget:
                break
            parts.append(text.rstrip() + "\n\n")
            total += len(text)
            files += 1
    data = "".join(parts).encode("utf-8")
    with lzma.open(out, "wb", preset=9) as f:
        f.write(data)
    print(f"{out}: {files} files, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main()
