#!/usr/bin/env python3
"""Renders chat templates exactly as Hugging Face transformers' apply_chat_template does,
with Debian's python3-jinja2: the reference ptxserve's own interpreter is compared with.

usage: render_reference.py CASES.json   (a list of {"template": PATH, "context": {...}})
prints a JSON list of {"text": ...} or {"error": ...}, one per case, in order."""
import datetime
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The fixed clock of the tests (ChatTemplate::set_strftime in the C++ test).
FIXED_NOW = datetime.datetime(2024, 7, 26, 13, 5, 9)


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers overrides Jinja's tojson: no HTML escaping, non-ASCII kept.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        with open(case["template"], encoding="utf-8") as f:
            source = f.read()
        try:
            out.append({"text": env.from_string(source).render(**case["context"])})
        except Exception as e:  # noqa: BLE001 - every failure is an expected error path
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
