#!/usr/bin/env python3
"""Renders fixtures/templates/jinja2-cases.txt (one template a line) with Jinja2 as transformers
configures it for chat templates (sandboxed, trim_blocks, lstrip_blocks, loop controls, its own
tojson) and writes fixtures/templates/jinja2-cases.json: [{"template", "render"}] — "render" is
null where Jinja2 raised. graft's test (Jinja.MatchesJinja2OnTheCases) renders each line and
compares. Needs python3 with jinja2 (Debian: python3-jinja2); run from the repository root."""
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override (utils/chat_template_utils.py): json.dumps with these options.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    cases = []
    with open("fixtures/templates/jinja2-cases.txt", encoding="utf-8") as f:
        for line in f.read().split("\n"):
            if not line:
                continue
            try:
                render = env.from_string(line).render()
            except Exception:  # noqa: BLE001 - any error is "Jinja2 refuses this template"
                render = None
            cases.append({"template": line, "render": render})
    with open("fixtures/templates/jinja2-cases.json", "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases rendered with Jinja2 {jinja2.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
