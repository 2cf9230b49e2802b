#!/usr/bin/env python3
"""The monitoring files against the real tools and a running server:
  - `promtool check config` / `check rules` on deploy/prometheus, and `promtool test rules`
    on tests/deploy/alerts_test.yml (every alert fires when it should, and only then);
  - `ptxserve serve` started with the arguments of the Deployment, docker-compose.yml and
    the Dockerfile (host, ports and model rewritten for loopback and the synthetic model):
    each becomes ready, answers the probes' health services and the image's HEALTHCHECK,
    and exits 0 on SIGTERM;
  - every ptxserve_* metric named by the HPA adapter rule, the alerts and the dashboard is
    in the server's /metrics;
  - a real Prometheus started from a copy of deploy/prometheus/prometheus.yml (target
    rewritten to the test server) scrapes it, loads the alerts, parses every dashboard
    query, and answers the token-throughput panel with data after a few requests.
Only 127.0.0.1 is used.

usage: deploy_prometheus_test.py --source-dir DIR --ptxserve BIN"""

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
import deploy_lib as lib  # noqa: E402

F = lib.Failures()

# Families that exist only once a GPU backend reports into them: labelled (by kernel, by kind),
# they have no series (and prometheus-cpp then prints no # HELP/# TYPE either) until the
# first launch. They must still be registered by server/metrics.cc.
GPU_ONLY_LABELLED = {"ptxserve_kernel_launches_total", "ptxserve_device_memory_bytes"}


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


def promtool_checks(root, promtool, tmp):
    out = run([promtool, "check", "config", os.path.join(root, lib.PROM_CONFIG)])
    F.check(out.returncode == 0, f"promtool check config:\n{out.stdout}{out.stderr}")
    out = run([promtool, "check", "rules", os.path.join(root, lib.PROM_ALERTS)])
    F.check(out.returncode == 0, f"promtool check rules:\n{out.stdout}{out.stderr}")
    # The Operator copy, written out as a plain rule file.
    yaml = lib.import_yaml()
    pr = [d for d in lib.load_yaml_docs(root, f"{lib.K8S_DIR}/prometheusrule.yaml")][0]
    op_rules = os.path.join(tmp, "operator-rules.yml")
    with open(op_rules, "w") as f:
        yaml.safe_dump({"groups": pr["spec"]["groups"]}, f)
    out = run([promtool, "check", "rules", op_rules])
    F.check(out.returncode == 0,
            f"promtool check rules (PrometheusRule):\n{out.stdout}{out.stderr}")
    # Unit tests: alerts.yml without annotations (see alerts_test.yml) beside the tests.
    ut = os.path.join(tmp, "unit")
    os.makedirs(ut)
    doc = lib.load_yaml(root, lib.PROM_ALERTS)
    for g in doc["groups"]:
        for r in g["rules"]:
            r.pop("annotations", None)
    with open(os.path.join(ut, "alerts.yml"), "w") as f:
        yaml.safe_dump(doc, f)
    shutil.copy(os.path.join(HERE, "alerts_test.yml"), ut)
    out = run([promtool, "test", "rules", "alerts_test.yml"], cwd=ut)
    F.check(out.returncode == 0, f"promtool test rules:\n{out.stdout}{out.stderr}")
    # Every alert has a unit test.
    tested = {t["alertname"] for case in lib.load_yaml(HERE, "alerts_test.yml")["tests"]
              for t in case.get("alert_rule_test", [])}
    for r in lib.alert_rules(doc):
        F.check(r["alert"] in tested, f"alert {r['alert']} has no test in alerts_test.yml")
    print(f"promtool: config, rules and {len(tested)} alert unit tests checked")


def loopback_args(args, cache_dir):
    """A deploy file's serve arguments, made runnable here: loopback, free ports, and the
    synthetic default model in cache_dir instead of /models."""
    out = []
    for a in args:
        name = a[2:].partition("=")[0].replace("-", "_")
        if name in ("host", "port", "metrics_port", "http_port", "model"):
            continue
        out.append(a)
    return out + ["--host=127.0.0.1", "--port=0", "--metrics-port=0", "--http-port=0",
                  f"--model-cache-dir={cache_dir}"]


def deploy_command_lines(root):
    """{where: serve args} of the Deployment, docker-compose.yml and the Dockerfile."""
    objs = lib.k8s_objects(root)
    c = objs[("Deployment", "ptxserve")]["spec"]["template"]["spec"]["containers"][0]
    lines = {"Deployment": lib.serve_argv(c.get("command", []) + c.get("args", []))}
    compose = lib.load_yaml(root, lib.COMPOSE)
    lines["docker-compose.yml"] = lib.serve_argv(compose["services"]["ptxserve"]["command"])
    by = {}
    for i, r in lib.dockerfile_stages(lib.read(root, lib.DOCKERFILE))[-1]["instructions"]:
        by.setdefault(i, []).append(r)
    lines["Dockerfile"] = lib.serve_argv(lib.exec_form(by["ENTRYPOINT"][-1]) +
                                         lib.exec_form(by["CMD"][-1]))
    _, hc = lib.healthcheck_argv(by["HEALTHCHECK"][-1])
    return lines, c, hc


def check_health(ptxserve, srv, container, healthcheck):
    """The probes' services and the image's HEALTHCHECK answer SERVING on srv."""
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        svc = container[probe]["grpc"].get("service", "")
        out = run([ptxserve, "client", "health", f"--target={srv.target}", f"--service={svc}"])
        F.check(out.returncode == 0 and "SERVING" in out.stdout,
                f"{probe}: health of service {svc!r}: {out.stdout}{out.stderr}")
    argv = [a if not a.startswith("--target=") else f"--target={srv.target}"
            for a in healthcheck]
    argv[0] = ptxserve
    out = run(argv)
    F.check(out.returncode == 0, f"HEALTHCHECK {argv}: {out.stdout}{out.stderr}")
    # And it fails when nothing serves there (exit 0 only when SERVING).
    dead = [a if not a.startswith("--target=") else f"--target=127.0.0.1:{lib.free_port()}"
            for a in argv]
    out = run(dead)
    F.check(out.returncode != 0, "HEALTHCHECK succeeds against a port nobody serves")


def deploy_metric_names(root):
    """{metric: [where]} of every ptxserve_* name the HPA rule, alerts and dashboard use."""
    names = {}

    def add(ms, where):
        for m in ms:
            names.setdefault(m, []).append(where)

    adapter = lib.load_yaml(root, f"{lib.K8S_DIR}/prometheus-adapter-values.yaml")
    for r in adapter["rules"]["custom"]:
        add(lib.promql_metrics(r["seriesQuery"]), "adapter rule")
        add({r.get("name", {}).get("as", "")} - {""}, "adapter rule name")
    hpa = lib.k8s_objects(root)[("HorizontalPodAutoscaler", "ptxserve")]
    add({m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"},
        "HPA")
    for r in lib.alert_rules(lib.load_yaml(root, lib.PROM_ALERTS)):
        add(lib.promql_metrics(r["expr"]), f"alert {r['alert']}")
    dash = json.loads(lib.read(root, lib.DASHBOARD))
    for title, e in lib.dashboard_exprs(dash):
        add(lib.promql_metrics(e), f"panel {title!r}")
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        add(lib.promql_metrics(q["query"] if isinstance(q, dict) else str(q or "")),
            f"variable {v['name']}")
    return names


def check_metric_names(root, names, exposition):
    types, samples = lib.parse_exposition(exposition)
    metrics_cc = lib.read(root, "server/metrics.cc")
    declared_only = []
    for name, where in sorted(names.items()):
        if name in samples:
            continue
        family = lib.metric_family(name, types)
        if family is not None:
            # Declared with # HELP/# TYPE but without samples yet (a labelled family
            # before its first child): the name is served, so it counts.
            declared_only.append(name)
            continue
        # Registered as CounterFamily(*registry_, "name", ...) or GaugeFamily(...).
        if name in GPU_ONLY_LABELLED and f'*registry_, "{name}"' in metrics_cc:
            print(f"note: {name} is not in /metrics of the CPU backend (no kernel launched; "
                  "registered in server/metrics.cc, fed by GPU backends)")
            continue
        F.check(False, f"{name} (used by {', '.join(sorted(set(where)))}) is not in /metrics")
    if declared_only:
        print(f"note: declared without samples: {declared_only}")
    # The HPA averages a gauge; rate() of counters in the alerts needs counters.
    F.check(types.get("ptxserve_requests_waiting") == "gauge",
            "ptxserve_requests_waiting is not a gauge")
    print(f"{len(names)} metric names of the deploy files checked against /metrics")


def start_prometheus(root, prometheus, tmp, metrics_port):
    """Prometheus from a copy of deploy/prometheus (target and intervals rewritten)."""
    yaml = lib.import_yaml()
    conf_dir = os.path.join(tmp, "prometheus")
    os.makedirs(conf_dir)
    conf = lib.load_yaml(root, lib.PROM_CONFIG)
    conf["global"]["scrape_interval"] = "1s"
    conf["global"]["evaluation_interval"] = "1s"
    for sc in conf["scrape_configs"]:
        sc["static_configs"] = [{"targets": [f"127.0.0.1:{metrics_port}"]}]
    with open(os.path.join(conf_dir, "prometheus.yml"), "w") as f:
        yaml.safe_dump(conf, f)
    for rf in conf.get("rule_files", []):
        shutil.copy(os.path.join(root, os.path.dirname(lib.PROM_CONFIG), rf), conf_dir)
    for attempt in range(3):
        port = lib.free_port()
        log_path = os.path.join(tmp, f"prometheus-{attempt}.log")
        log = open(log_path, "w")
        proc = lib.popen([prometheus, f"--config.file={conf_dir}/prometheus.yml",
                          f"--storage.tsdb.path={tmp}/data-{attempt}",
                          f"--web.listen-address=127.0.0.1:{port}"],
                         stdout=log, stderr=subprocess.STDOUT)
        log.close()

        def ready():
            if proc.poll() is not None:
                return "exited"
            try:
                return lib.http_get(port, "/-/ready", timeout=2) and "ready"
            except OSError:
                return None

        state = lib.wait_until(ready, timeout=30)
        if state == "ready":
            return proc, port, log_path
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if state is None:
            break
    raise RuntimeError("Prometheus did not start:\n" + open(log_path).read()[-3000:])


def query(port, expr):
    """(status, result) of an instant query; status None when unreachable."""
    try:
        body = lib.http_get(port, "/api/v1/query?query=" + urllib.parse.quote(expr))
    except OSError as e:
        body = getattr(e, "read", lambda: b"")()
        body = body.decode() if isinstance(body, bytes) else ""
        if not body:
            return None, None
    data = json.loads(body)
    return data.get("status"), data.get("data", {}).get("result") or data.get("error")


def check_prometheus(root, ptxserve, prometheus, tmp, srv):
    try:
        proc, port, log_path = start_prometheus(root, prometheus, tmp, srv.metrics_port)
    except RuntimeError as e:
        F.check(False, str(e))
        return
    try:
        up = lib.wait_until(lambda: (r := query(port, 'up{job="ptxserve"}')[1]) and
                            isinstance(r, list) and r[0]["value"][1] == "1", timeout=30)
        if not F.check(up, "Prometheus never scraped the test server as up:\n" +
                       open(log_path).read()[-3000:]):
            return
        # Traffic after the first scrape, so that counters move between samples.
        for i in range(3):
            out = run([ptxserve, "client", "generate", f"--target={srv.target}",
                       "--prompt=Once upon a time", "--max-tokens=16", "--ignore-eos",
                       f"--request-id=deploy-{i}", "--timeout=60"])
            F.check(out.returncode == 0, f"client generate: {out.stdout}{out.stderr}")

        dash = json.loads(lib.read(root, lib.DASHBOARD))
        exprs = lib.dashboard_exprs(dash)
        throughput = [lib.grafana_substitute(e) for t, e in exprs
                      if t == "Token throughput" and "generated_tokens_total" in e]
        F.check(throughput, "dashboard: no 'Token throughput' panel with generated tokens")

        def has_data():
            st, res = query(port, throughput[0])
            return st == "success" and isinstance(res, list) and res and \
                float(res[0]["value"][1]) > 0 and res

        data = lib.wait_until(has_data, timeout=30, period=0.5) if throughput else None
        F.check(data, f"dashboard query {throughput[:1]} returned no data > 0 within 30 s")
        if data:
            print(f"dashboard query {throughput[0]!r} -> {data[0]['value'][1]} tokens/s")

        # Every dashboard query parses and evaluates in this Prometheus.
        for title, e in exprs:
            st, res = query(port, lib.grafana_substitute(e))
            F.check(st == "success", f"panel {title!r}: query {e!r} failed: {res}")
        def all_tokens():
            st, res = query(port, 'sum(ptxserve_generated_tokens_total{job="ptxserve"})')
            return st == "success" and res and float(res[0]["value"][1]) >= 48 and res

        F.check(lib.wait_until(all_tokens, timeout=15, period=0.5),
                f"ptxserve_generated_tokens_total never reached 3 x 16 tokens: "
                f"{query(port, 'ptxserve_generated_tokens_total')}")

        # The alert rules loaded from the copied rule file, and evaluate without error.
        want = {r["alert"] for r in lib.alert_rules(lib.load_yaml(root, lib.PROM_ALERTS))}

        def rules_evaluated():
            try:
                body = json.loads(lib.http_get(port, "/api/v1/rules?type=alert"))
            except OSError:
                return None
            rules = [r for g in body["data"]["groups"] for r in g["rules"]]
            done = [r for r in rules if r.get("lastEvaluation", "").startswith("0001") is False
                    and r.get("health") != "unknown"]
            return rules if len(done) == len(rules) and rules else None

        rules = lib.wait_until(rules_evaluated, timeout=15, period=0.5) or []
        F.check({r["name"] for r in rules} == want,
                f"Prometheus loaded alerts {sorted(r['name'] for r in rules)}, expected "
                f"{sorted(want)}")
        for r in rules:
            F.check(r.get("health") == "ok", f"alert {r['name']}: health {r.get('health')} "
                    f"{r.get('lastError', '')}")
        # A healthy, idle server fires nothing.
        firing = [r["name"] for r in rules if r.get("state") == "firing"]
        F.check(not firing, f"alerts firing against a healthy server: {firing}")
        print(f"Prometheus: scraped, {len(rules)} alerts loaded and healthy, "
              f"{len(exprs)} dashboard queries evaluate")
    finally:
        proc.kill()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--ptxserve", required=True)
    args = ap.parse_args()
    lib.import_yaml()
    root = args.source_dir
    promtool = shutil.which("promtool")
    prometheus = shutil.which("prometheus")
    if not promtool or not prometheus:
        lib.skip_or_fail("promtool/prometheus not found (Debian: apt-get install prometheus)")

    tmp = tempfile.mkdtemp(prefix="ptxserve-deploy-")
    servers = []
    try:
        promtool_checks(root, promtool, tmp)
        lines, container, healthcheck = deploy_command_lines(root)
        cache = os.path.join(tmp, "cache")
        for where, serve_args in lines.items():
            try:
                srv = lib.Server(args.ptxserve, loopback_args(serve_args, cache))
            except RuntimeError as e:
                F.check(False, f"{where}: {e}")
                continue
            servers.append((where, srv))
            print(f"{where}: `ptxserve serve {' '.join(srv.args)}` ready on {srv.target}")
        if not servers or servers[0][0] != "Deployment":
            F.finish("deploy_prometheus")
        srv = servers[0][1]
        check_health(args.ptxserve, srv, container, healthcheck)
        exposition = lib.http_get(srv.metrics_port, "/metrics")
        check_metric_names(root, deploy_metric_names(root), exposition)
        check_prometheus(root, args.ptxserve, prometheus, tmp, srv)
        # SIGTERM drains and exits 0 (the Deployment's grace period relies on it).
        for where, s in servers:
            code = s.terminate(timeout=60)
            F.check(code == 0, f"{where}: ptxserve exited {code} on SIGTERM:\n{s.output()[-2000:]}")
    finally:
        for _, s in servers:
            s.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    F.finish("deploy_prometheus")


if __name__ == "__main__":
    main()
