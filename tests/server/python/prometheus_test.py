#!/usr/bin/env python3
"""ptxserve's /metrics against the real Prometheus tools: `promtool check metrics` on a
scrape, then a Prometheus server (started here, loopback only) scrapes ptxserve and a
query for ptxserve_generated_tokens_total returns a value > 0.

usage: prometheus_test.py --ptxserve BIN [--shared-models DIR]"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ptxserve_testlib as lib  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptxserve", required=True)
    ap.add_argument("--shared-models", default="")
    args = ap.parse_args()
    promtool = shutil.which("promtool")
    prometheus = shutil.which("prometheus")
    if not promtool or not prometheus:
        lib.skip_or_fail("promtool/prometheus not found (Debian: apt-get install prometheus)")

    srv = lib.Server(args.ptxserve, shared_models=args.shared_models)
    prom = None
    tmp = tempfile.mkdtemp(prefix="ptxserve-prom-")
    try:
        # Some traffic, so that every histogram has observations.
        out = subprocess.run([args.ptxserve, "client", "generate", "--target", srv.target,
                              "--prompt", "Once upon a time", "--max-tokens", "16",
                              "--ignore-eos"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        text = lib.http_get(srv.metrics_port)
        check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                               text=True)
        assert check.returncode == 0, "promtool check metrics:\n" + check.stdout + check.stderr
        assert "ptxserve_generated_tokens_total 16" in text, text

        port = lib.free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: ptxserve\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{srv.metrics_port}']\n")
        log = open(os.path.join(tmp, "prometheus.log"), "w")
        prom = subprocess.Popen([prometheus, f"--config.file={config}",
                                 f"--storage.tsdb.path={os.path.join(tmp, 'data')}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)

        def query(q):
            try:
                body = lib.http_get(port, "/api/v1/query?query=" + urllib.parse.quote(q))
            except OSError:
                return None
            data = json.loads(body)
            if data.get("status") != "success" or not data["data"]["result"]:
                return None
            return data["data"]["result"]

        up = lib.wait_until(lambda: (r := query('up{job="ptxserve"}')) and
                            r[0]["value"][1] == "1", timeout=30)
        assert up, "Prometheus never saw the target up:\n" + open(log.name).read()[-2000:]
        value = lib.wait_until(lambda: (r := query("ptxserve_generated_tokens_total")) and
                               float(r[0]["value"][1]) > 0 and r, timeout=30)
        assert value, "no ptxserve_generated_tokens_total > 0:\n" + open(log.name).read()[-2000:]
        print("prometheus test: OK, ptxserve_generated_tokens_total =", value[0]["value"][1])
    finally:
        if prom is not None:
            prom.kill()
            prom.wait()
        srv.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
