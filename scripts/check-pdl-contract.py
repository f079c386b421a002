#!/usr/bin/env python3
"""Checks the programmatic-dependent-launch contract (src/backend/cuda/pdl.cuh) in CUDA sources.

  scripts/check-pdl-contract.py FILE_OR_DIR...

Every kernel is launched with programmatic stream serialization allowed, so a kernel that reads
its inputs before waiting for the kernel that wrote them races with it, and one that returns
before waiting can complete ahead of its predecessor. This refuses, naming the file and line:
  - a <<<...>>> launch (LaunchPdl launches every kernel),
  - a __global__ function whose body has a `return` before its PdlBegin() / AwaitPredecessors()
    call, or no such call at all.
Comments and string literals are ignored. Exit 0 and "pdl contract: N kernels, M files" when
all is kept, 1 with one line a problem otherwise.
"""
import os
import re
import sys


def strip_comments(src):
    """The source with comments and string/char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(''.join(ch if ch == '\n' else ' ' for ch in src[i:j]))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == '\\' else 1
            out.append(c + ' ' * (min(j, n) - i - 1) + (c if j < n else ''))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def line_of(src, pos):
    return src.count('\n', 0, pos) + 1


def check(path):
    raw = open(path, encoding='utf-8').read()
    src = strip_comments(raw)
    problems, kernels = [], 0
    for m in re.finditer(r'<<<', src):
        problems.append(f'{path}:{line_of(src, m.start())}: a <<<>>> launch (launch with LaunchPdl, pdl.cuh)')
    for m in re.finditer(r'\b__global__\b', src):
        open_brace = src.find('{', m.start())
        semi = src.find(';', m.start())
        if open_brace < 0 or (0 <= semi < open_brace):
            continue  # a declaration, not a definition
        depth, j = 0, open_brace
        while j < len(src):
            if src[j] == '{':
                depth += 1
            elif src[j] == '}':
                depth -= 1
                if depth == 0:
                    break
            j += 1
        body = src[open_brace:j]
        header = src[m.start():open_brace]
        names = re.findall(r'(\w+)\s*\(', header)
        # The kernel's name: the first identifier followed by '(' that is not __launch_bounds__.
        kname = [x for x in names if x not in ('__launch_bounds__', 'static_cast')]
        kname = kname[0] if kname else '?'
        kernels += 1
        wait = re.search(r'\b(PdlBegin|AwaitPredecessors)\s*\(', body)
        ret = re.search(r'\breturn\b', body)
        line = line_of(src, m.start())
        if not wait:
            problems.append(f'{path}:{line}: kernel {kname} never calls PdlBegin() or AwaitPredecessors()')
        elif ret and ret.start() < wait.start():
            problems.append(f'{path}:{line_of(src, open_brace + ret.start())}: kernel {kname} returns before '
                            'waiting for its predecessor (call PdlBegin() / AwaitPredecessors() first)')
    return kernels, problems


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    files = []
    for a in argv[1:]:
        if os.path.isdir(a):
            for root, _, names in os.walk(a):
                files += [os.path.join(root, x) for x in sorted(names) if x.endswith(('.cu', '.cuh'))]
        elif os.path.isfile(a):
            files.append(a)
        else:
            print(f'check-pdl-contract: {a}: no such file or directory', file=sys.stderr)
            return 2
    total, problems = 0, []
    for f in sorted(files):
        if os.path.basename(f) == 'pdl.cuh':
            continue  # the contract itself (its comments name <<<>>>)
        k, p = check(f)
        total += k
        problems += p
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f'pdl contract: {total} kernels, {len(files)} files')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
