#!/usr/bin/env python3
"""Renders chat templates exactly as Hugging Face transformers does (the reference for
tests/chat): jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols]) with the globals raise_exception and strftime_now and the
json.dumps-based tojson filter, as in transformers' _compile_jinja_template.

Reads a JSON list of cases from stdin, each {"template": str, "context": {...}, "now":
unix seconds or null}; writes a JSON list of {"output": str} or {"error": str}.
"""

import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def render(case):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        now = case.get("now")
        return (datetime.now() if now is None else datetime.fromtimestamp(now)).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return {"output": env.from_string(case["template"]).render(**case["context"])}
    except Exception as e:  # any failure is an error the C++ side must also report
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    cases = json.load(sys.stdin)
    json.dump([render(c) for c in cases], sys.stdout, ensure_ascii=True)


if __name__ == "__main__":
    main()
