#!/usr/bin/env python3
"""Fills "expected" (or "error") of every case in interpreter_cases.json from jinja2
rendering through render_reference.py, so the interpreter's unit expectations are what
Hugging Face's environment produces. Run after adding a case:
    python3 tests/chat/update_cases.py
"""

import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
path = os.path.join(here, "interpreter_cases.json")
with open(path, encoding="utf-8") as f:
    cases = json.load(f)
request = [{"template": c["template"], "context": c["context"], "now": None} for c in cases]
result = subprocess.run([sys.executable, os.path.join(here, "render_reference.py")],
                        input=json.dumps(request), capture_output=True, text=True, check=True)
for case, got in zip(cases, json.loads(result.stdout)):
    case.pop("expected", None)
    case.pop("error", None)
    if "output" in got:
        case["expected"] = got["output"]
    else:
        case["error"] = got["error"]
with open(path, "w", encoding="utf-8") as f:
    json.dump(cases, f, indent=1, ensure_ascii=False)
    f.write("\n")
