#!/usr/bin/env python3
"""The deployment files agree with each other and with the server, without a Docker
engine or a cluster: every YAML and JSON file parses; the `ptxserve serve` command lines of
the Dockerfile, docker-compose.yml and the Deployment use only flags `ptxserve serve --help`
lists, listen on 0.0.0.0 and on the ports their EXPOSE / containerPort / probes / Services /
PodMonitor / scrape target name; probes use grpc.health.v1; the runtime image installs
every Debian package behind `ldd ptxserve` and no toolchain; .dockerignore keeps the build
inputs; the PrometheusRule equals alerts.yml; the HPA metric is the adapter rule's.

usage: deploy_manifests_test.py --source-dir DIR --ptxserve BIN"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deploy_lib as lib  # noqa: E402

F = lib.Failures()


def check_parse(root):
    """Every YAML and JSON file of the deployment parses."""
    yaml = lib.import_yaml()
    files = [lib.COMPOSE]
    for d in ("deploy",):
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            for n in sorted(names):
                files.append(os.path.relpath(os.path.join(dirpath, n), root))
    parsed = 0
    for rel in files:
        text = lib.read(root, rel)
        try:
            if rel.endswith(".json"):
                json.loads(text)
            elif rel.endswith((".yml", ".yaml")):
                docs = [d for d in yaml.safe_load_all(text) if d is not None]
                F.check(docs, f"{rel}: no YAML document")
            else:
                continue
            parsed += 1
        except (ValueError, yaml.YAMLError) as e:
            F.check(False, f"{rel} does not parse: {e}")
    F.check(parsed >= 12, f"only {parsed} YAML/JSON files found under deploy/")
    print(f"parsed {parsed} YAML/JSON files")


def check_serve_args(where, args, serve_flags, ports):
    """Flags exist, --host is 0.0.0.0, the ports are the expected ones."""
    try:
        flags = lib.parse_flags(args)
    except ValueError as e:
        F.check(False, f"{where}: {e}")
        return
    for name, value in flags:
        F.check(name in serve_flags, f"{where}: --{name} is not a `ptxserve serve` flag")
        F.check(value is not None and value != "",
                f"{where}: give --{name} as --{name}=VALUE (the deploy files' convention)")
    F.check(lib.flag_value(args, "host") == "0.0.0.0",
            f"{where}: --host=0.0.0.0 missing (the default 127.0.0.1 is unreachable from "
            "outside the container)")
    F.check(lib.flag_value(args, "port") == str(ports["grpc"]),
            f"{where}: --port={lib.flag_value(args, 'port')}, expected {ports['grpc']}")
    F.check(lib.flag_value(args, "http_port") == str(ports["http"]),
            f"{where}: --http-port={lib.flag_value(args, 'http_port')}, expected {ports['http']}")
    F.check(lib.flag_value(args, "metrics_port") == str(ports["metrics"]),
            f"{where}: --metrics-port={lib.flag_value(args, 'metrics_port')}, "
            f"expected {ports['metrics']}")


def check_dockerfile(root, ptxserve, serve_flags, client_flags, ports):
    text = lib.read(root, lib.DOCKERFILE)
    stages = lib.dockerfile_stages(text)
    F.check(len(stages) >= 2, "Dockerfile: expected a builder and a runtime stage")
    builder, runtime = stages[0], stages[-1]
    F.check(builder["from"] == "debian:bookworm",
            f"Dockerfile: builder FROM {builder['from']}, expected debian:bookworm")
    F.check(runtime["from"] == "debian:bookworm-slim",
            f"Dockerfile: runtime FROM {runtime['from']}, expected debian:bookworm-slim")
    b_runs = " ".join(r for i, r in builder["instructions"] if i == "RUN")
    F.check("bash scripts/setup" in b_runs, "Dockerfile: the builder does not run scripts/setup")
    # The same configure and build as scripts/serve (and CI's scripts/test).
    serve_script = lib.read(root, "scripts/serve")
    for step in ("cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release",
                 "--target ptxserve"):
        F.check(step in serve_script, f"scripts/serve no longer runs `{step}`: update the test")
        F.check(step in b_runs, f"Dockerfile: the builder does not run `{step}` as scripts/serve")

    ins = runtime["instructions"]
    by = {}
    for i, r in ins:
        by.setdefault(i, []).append(r)
    copies = [r for r in by.get("COPY", []) if "--from=" in r]
    F.check(any("build/server/ptxserve" in c for c in copies),
            "Dockerfile: the runtime stage does not copy build/server/ptxserve from the builder")
    user = (by.get("USER") or ["root"])[-1].split(":")[0]
    F.check(user.isdigit() and int(user) != 0,
            f"Dockerfile: USER {user}: must be a numeric non-root uid (runAsNonRoot checks it)")
    env = " ".join(by.get("ENV", []))
    F.check(re.search(r"\bNVIDIA_DRIVER_CAPABILITIES=compute\b", env),
            "Dockerfile: ENV NVIDIA_DRIVER_CAPABILITIES=compute missing")
    F.check("NVIDIA_VISIBLE_DEVICES" in text,
            "Dockerfile: NVIDIA_VISIBLE_DEVICES is not documented")
    volumes = " ".join(by.get("VOLUME", []))
    F.check("/models" in volumes, "Dockerfile: no VOLUME for /models")

    exposed = set()
    for e in by.get("EXPOSE", []):
        exposed |= {int(p.split("/")[0]) for p in e.split()}
    F.check(exposed == set(ports.values()),
            f"Dockerfile: EXPOSE {sorted(exposed)}, expected {sorted(ports.values())}")

    entry = lib.exec_form(by["ENTRYPOINT"][-1]) if "ENTRYPOINT" in by else []
    cmd = lib.exec_form(by["CMD"][-1]) if "CMD" in by else []
    argv = entry + cmd
    F.check(argv[:1] == ["/usr/local/bin/ptxserve"] and "serve" in argv,
            f"Dockerfile: ENTRYPOINT+CMD {argv} does not run `ptxserve serve`")
    serve = lib.serve_argv(argv)
    check_serve_args("Dockerfile CMD", serve, serve_flags, ports)
    F.check(lib.flag_value(serve, "model") == "/models", "Dockerfile CMD: --model=/models missing")

    hc = by.get("HEALTHCHECK", [])
    F.check(len(hc) == 1, "Dockerfile: exactly one HEALTHCHECK expected")
    if hc:
        _, hargv = lib.healthcheck_argv(hc[0])
        F.check(hargv[:3] == ["/usr/local/bin/ptxserve", "client", "health"],
                f"Dockerfile: HEALTHCHECK runs {hargv}, expected `ptxserve client health`")
        hargs = hargv[3:]
        for name, _ in lib.parse_flags(hargs):
            F.check(name in client_flags, f"HEALTHCHECK: --{name} is not a `client` flag")
        target = lib.flag_value(hargs, "target") or ""
        F.check(target == f"127.0.0.1:{ports['grpc']}",
                f"HEALTHCHECK: --target={target}, expected 127.0.0.1:{ports['grpc']}")

    # Runtime packages: every library the binary links comes from a listed package; no
    # toolchain, headers or CUDA.
    pkgs = set()
    for r in by.get("RUN", []):
        pkgs |= set(lib.apt_installs(r))
    F.check(pkgs, "Dockerfile: the runtime stage installs no packages")
    for p in sorted(pkgs):
        F.check(not p.endswith("-dev") and "cuda" not in p and p not in (
            "build-essential", "cmake", "g++", "gcc", "ninja-build", "protobuf-compiler"),
            f"Dockerfile: runtime stage installs build-time or CUDA package {p}")
    needed = linked_packages(ptxserve)
    if needed is None:
        print("note: ldd/dpkg unavailable: runtime library packages not cross-checked")
    else:
        missing = needed - pkgs - {"libc6"}  # libc6 is in every Debian image
        F.check(not missing, f"Dockerfile: runtime stage lacks {sorted(missing)}, which provide "
                "libraries `ldd ptxserve` lists")
        installed = dpkg_installed(pkgs)
        if installed is not None:
            F.check(not (pkgs - installed),
                    f"Dockerfile: runtime packages {sorted(pkgs - installed)} are unknown here "
                    "(misspelt, or another Debian release)")
        print(f"runtime packages cover the {len(needed)} packages behind ldd: {sorted(needed)}")


def linked_packages(binary):
    """Debian packages owning the shared libraries `ldd binary` resolves, or None."""
    if not shutil.which("ldd") or not shutil.which("dpkg"):
        return None
    out = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    libs = re.findall(r"=>\s+(/\S+)", out.stdout)
    F.check("not found" not in out.stdout, f"ldd {binary}: unresolved libraries:\n{out.stdout}")
    # One dpkg -S for all of them, under both spellings of merged /usr.
    def variants(path):
        out = set()
        for c in (path, os.path.realpath(path)):
            out |= {c, re.sub(r"^/usr/lib/", "/lib/", c), re.sub(r"^/lib/", "/usr/lib/", c)}
        return out

    candidates = sorted(set().union(*(variants(p) for p in libs))) if libs else []
    r = subprocess.run(["dpkg", "-S"] + candidates, capture_output=True, text=True)
    owner_of = {}
    for line in r.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        owner_of[path.strip()] = pkg.split(":")[0].strip()
    pkgs = set()
    for path in libs:
        owner = next((owner_of[c] for c in sorted(variants(path)) if c in owner_of), None)
        F.check(owner, f"no Debian package owns {path} (linked by ptxserve)")
        if owner:
            pkgs.add(owner)
    return pkgs


def dpkg_installed(pkgs):
    if not shutil.which("dpkg-query"):
        return None
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Status}\n"] + sorted(pkgs),
                         capture_output=True, text=True)
    return {ln.split()[0] for ln in out.stdout.splitlines() if ln.endswith("installed")}


def dockerignore_excludes(patterns, path):
    """Whether Docker's .dockerignore rules exclude `path` (or a directory above it)."""
    def to_re(p):
        out = ""
        i = 0
        while i < len(p):
            if p.startswith("**/", i):
                out += "(?:.*/)?"
                i += 3
            elif p.startswith("**", i):
                out += ".*"
                i += 2
            elif p[i] == "*":
                out += "[^/]*"
                i += 1
            elif p[i] == "?":
                out += "[^/]"
                i += 1
            else:
                out += re.escape(p[i])
                i += 1
        return re.compile(out + r"\Z")

    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for raw in patterns:
        neg = raw.startswith("!")
        p = raw[1:] if neg else raw
        p = os.path.normpath(p.lstrip("/"))
        rx = to_re(p)
        if any(rx.match(x) for x in prefixes):
            excluded = not neg
    return excluded


def check_dockerignore(root):
    patterns = [ln.strip() for ln in lib.read(root, lib.DOCKERIGNORE).splitlines()
                if ln.strip() and not ln.strip().startswith("#")]
    # The build inputs: what the top CMakeLists.txt configures, and scripts/.
    top = lib.read(root, "CMakeLists.txt")
    dirs = set(re.findall(r"add_subdirectory\((\w+)\)", top)) | {"scripts", "proto"}
    inputs = ["CMakeLists.txt", ".clang-format"]
    for d in sorted(dirs):
        for dirpath, dirnames, names in os.walk(os.path.join(root, d)):
            # Installed packages (npm) are not sources: scripts/setup puts them in place.
            dirnames[:] = [x for x in dirnames if x not in ("__pycache__", "node_modules")]
            inputs += [os.path.relpath(os.path.join(dirpath, n), root) for n in names
                       if not n.endswith(".swp")]
    kept_out = [p for p in inputs if dockerignore_excludes(patterns, p)]
    F.check(not kept_out, f".dockerignore excludes build inputs: {kept_out[:10]}")
    for p in (".git/HEAD", "build/CMakeCache.txt", "build-deploy/server/ptxserve",
              "build-asan/x", "deploy/kubernetes/deployment.yaml"):
        F.check(dockerignore_excludes(patterns, p), f".dockerignore does not exclude {p}")
    print(f".dockerignore keeps all {len(inputs)} build inputs")


def compose_volume(v):
    """(source, target, mode) of a short-syntax compose volume; ${VAR...} in the source
    (which may hold colons) becomes $VAR."""
    parts = re.sub(r"\$\{(\w+)[^}]*\}", r"$\1", str(v)).split(":")
    return parts[0], parts[1] if len(parts) > 1 else parts[0], parts[2] if len(parts) > 2 else ""


def check_compose(root, serve_flags, ports):
    c = lib.load_yaml(root, lib.COMPOSE)
    svcs = c.get("services", {})
    F.check({"ptxserve", "prometheus", "grafana"} <= set(svcs),
            f"docker-compose.yml: services {sorted(svcs)}, expected ptxserve, prometheus, grafana")
    s = svcs.get("ptxserve", {})
    cmd = s.get("command", [])
    F.check(isinstance(cmd, list) and cmd[:1] == ["serve"],
            "docker-compose.yml: ptxserve command must be the exec list [serve, ...]")
    serve = cmd[1:]
    check_serve_args("docker-compose.yml ptxserve", serve, serve_flags, ports)
    container_ports = set()
    for p in s.get("ports", []):
        container_ports.add(int(str(p).split(":")[-1].split("/")[0]))
    F.check(ports["grpc"] in container_ports,
            f"docker-compose.yml: gRPC port {ports['grpc']} not published ({container_ports})")
    F.check(ports["http"] in container_ports,
            f"docker-compose.yml: HTTP port {ports['http']} not published ({container_ports})")
    targets = {t: src for src, t, _ in map(compose_volume, s.get("volumes", []))}
    model = lib.flag_value(serve, "model")
    F.check(model in targets, f"docker-compose.yml: --model={model} but no volume mounted there")
    F.check(s.get("read_only") is True, "docker-compose.yml: ptxserve should run read_only")
    gpu = (s.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", []))
    F.check(any(d.get("driver") == "nvidia" for d in gpu),
            "docker-compose.yml: no nvidia GPU reservation for ptxserve")

    # Prometheus reads deploy/prometheus/prometheus.yml, whose target is this service.
    prom = svcs.get("prometheus", {})
    mounts = {t: src for src, t, _ in map(compose_volume, prom.get("volumes", []))}
    conf = next((a.split("=", 1)[1] for a in prom.get("command", [])
                 if a.startswith("--config.file=")), "")
    host_conf = None
    for target, src in mounts.items():
        if conf.startswith(target.rstrip("/") + "/"):
            host_conf = os.path.normpath(os.path.join(src, conf[len(target.rstrip("/")) + 1:]))
    F.check(host_conf == lib.PROM_CONFIG,
            f"docker-compose.yml: Prometheus reads {conf} = {host_conf}, "
            f"expected {lib.PROM_CONFIG}")
    pc = lib.load_yaml(root, lib.PROM_CONFIG)
    tgts = [t for sc in pc["scrape_configs"] for st in sc.get("static_configs", [])
            for t in st["targets"]]
    F.check(f"ptxserve:{ports['metrics']}" in tgts,
            f"{lib.PROM_CONFIG}: targets {tgts} lack the compose service "
            f"ptxserve:{ports['metrics']}")

    # Grafana: provisioning and dashboards mounted from deploy/grafana; the data source is
    # the prometheus service; the dashboard provider reads the dashboards mount.
    g = svcs.get("grafana", {})
    gm = {t: src for src, t, _ in map(compose_volume, g.get("volumes", []))}
    for target, src in gm.items():
        if src.startswith("./"):
            F.check(os.path.exists(os.path.join(root, src)),
                    f"docker-compose.yml: grafana mounts missing {src}")
    prov = next((src for t, src in gm.items() if t == "/etc/grafana/provisioning"), None)
    F.check(prov == "./deploy/grafana/provisioning",
            "docker-compose.yml: grafana provisioning is not ./deploy/grafana/provisioning")
    ds = lib.load_yaml(root, "deploy/grafana/provisioning/datasources/prometheus.yml")
    url = ds["datasources"][0]["url"]
    F.check(url == "http://prometheus:9090", f"Grafana data source url {url}")
    prov_d = lib.load_yaml(root, "deploy/grafana/provisioning/dashboards/ptxserve.yml")
    path = prov_d["providers"][0]["options"]["path"]
    F.check(gm.get(path) == "./deploy/grafana/dashboards",
            f"Grafana dashboard provider reads {path}, not the mount of "
            "./deploy/grafana/dashboards")
    for v in list(s.get("volumes", [])) + list(prom.get("volumes", [])):
        src = compose_volume(v)[0]
        if src.startswith("./"):
            F.check(os.path.exists(os.path.join(root, src)), f"docker-compose.yml: missing {src}")


def check_kubernetes(root, serve_flags, ports, metrics_in_rules):
    objs = lib.k8s_objects(root)
    kinds = {k for k, _ in objs}
    want = {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler",
            "PodMonitor", "PrometheusRule"}
    F.check(want <= kinds, f"kustomization lacks {sorted(want - kinds)}")
    listed = set(lib.load_yaml(root, f"{lib.K8S_DIR}/kustomization.yaml")["resources"])
    for n in os.listdir(os.path.join(root, lib.K8S_DIR)):
        if n.endswith((".yaml", ".yml")) and n not in ("kustomization.yaml",
                                                        "prometheus-adapter-values.yaml"):
            F.check(n in listed, f"{lib.K8S_DIR}/{n} is not listed in kustomization.yaml")

    dep = objs[("Deployment", "ptxserve")]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    F.check(all(labels.get(k) == v for k, v in dep["spec"]["selector"]["matchLabels"].items()),
            "Deployment: selector does not match the pod labels")
    spec = pod["spec"]
    c = spec["containers"][0]
    argv = c.get("command", []) + c.get("args", [])
    serve = lib.serve_argv(argv)
    check_serve_args("Deployment", serve, serve_flags, ports)
    cports = {p["name"]: p["containerPort"] for p in c["ports"]}
    F.check(cports == ports, f"Deployment: container ports {cports}, expected {ports}")

    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = c.get(probe)
        if not F.check(p and "grpc" in p, f"Deployment: {probe} is not a native gRPC probe"):
            continue
        F.check(p["grpc"].get("port") == ports["grpc"],
                f"Deployment: {probe} probes port {p['grpc'].get('port')}, not --port")
        F.check(p["grpc"].get("service", "") in lib.HEALTH_SERVICES,
                f"Deployment: {probe} asks for unknown health service {p['grpc'].get('service')}")

    res = c["resources"]
    F.check(str(res["limits"].get("nvidia.com/gpu")) == "1" and
            str(res["requests"].get("nvidia.com/gpu", "1")) == "1",
            "Deployment: nvidia.com/gpu: 1 missing from limits")
    for k in ("cpu", "memory"):
        F.check(k in res["requests"] and k in res["limits"], f"Deployment: no {k} request/limit")
    F.check(any(k.startswith("nvidia.com/") for k in spec.get("nodeSelector", {})),
            "Deployment: no GPU nodeSelector")
    F.check(any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])),
            "Deployment: no toleration for nvidia.com/gpu taints")

    psc = spec.get("securityContext", {})
    csc = c.get("securityContext", {})
    F.check(psc.get("runAsNonRoot") or csc.get("runAsNonRoot"), "Deployment: runAsNonRoot unset")
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    F.check(uid not in (None, 0), "Deployment: runAsUser must be a non-root uid")
    docker_user = [r for i, r in lib.dockerfile_instructions(lib.read(root, lib.DOCKERFILE))
                   if i == "USER"][-1].split(":")[0]
    F.check(str(uid) == docker_user,
            f"Deployment: runAsUser {uid} != Dockerfile USER {docker_user}")
    F.check(csc.get("readOnlyRootFilesystem") is True,
            "Deployment: readOnlyRootFilesystem is not true")
    F.check(csc.get("allowPrivilegeEscalation") is False,
            "Deployment: allowPrivilegeEscalation is not false")

    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    F.check(env.get("NVIDIA_DRIVER_CAPABILITIES") == "compute",
            "Deployment: NVIDIA_DRIVER_CAPABILITIES=compute missing")
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    model = lib.flag_value(serve, "model")
    F.check(model in mounts and mounts[model].get("readOnly") is True,
            f"Deployment: --model={model} is not a read-only volume mount")
    # Read-only root: everything ptxserve or the driver writes is on a writable volume.
    for var in ("XDG_CACHE_HOME", "CUDA_CACHE_PATH"):
        path = env.get(var)
        F.check(path and any(path == mp or path.startswith(mp.rstrip("/") + "/")
                             for mp, m in mounts.items() if not m.get("readOnly")),
                f"Deployment: {var}={path} is not on a writable volume")
    F.check("/tmp" in mounts, "Deployment: no writable /tmp on the read-only root")
    for m in mounts.values():
        F.check(m["name"] in vols, f"Deployment: volumeMount {m['name']} has no volume")

    drain = float(lib.flag_value(serve, "drain_timeout") or 30)
    F.check(spec.get("terminationGracePeriodSeconds", 30) > drain,
            "Deployment: terminationGracePeriodSeconds must exceed --drain-timeout")

    # Services and the headless Service.
    svcs = [o for (k, _), o in objs.items() if k == "Service"]
    F.check(any(s["spec"].get("clusterIP") == "None" for s in svcs), "no headless Service")
    F.check(any(s["spec"].get("clusterIP") != "None" for s in svcs), "no ClusterIP Service")
    for s in svcs:
        name = s["metadata"]["name"]
        F.check(all(labels.get(k) == v for k, v in s["spec"]["selector"].items()),
                f"Service {name}: selector does not match the pod labels")
        for p in s["spec"]["ports"]:
            tp = p.get("targetPort", p["port"])
            F.check(tp in cports or tp in cports.values(),
                    f"Service {name}: targetPort {tp} is no container port")
        F.check(any(p.get("targetPort") in ("grpc", ports["grpc"]) for p in s["spec"]["ports"]),
                f"Service {name}: no gRPC port")
        if name == "ptxserve":
            F.check(any(p.get("targetPort") in ("http", ports["http"]) for p in s["spec"]["ports"]),
                    f"Service {name}: no HTTP (OpenAI API) port")

    pm = objs[("PodMonitor", "ptxserve")]
    F.check(all(labels.get(k) == v for k, v in pm["spec"]["selector"]["matchLabels"].items()),
            "PodMonitor: selector does not match the pod labels")
    eps = pm["spec"]["podMetricsEndpoints"]
    F.check(all(e.get("port") == "metrics" and e.get("path", "/metrics") == "/metrics"
                for e in eps), "PodMonitor: endpoints must scrape port 'metrics' at /metrics")
    # The alert rules select job="ptxserve": the PodMonitor must produce that job label.
    job = labels.get(pm["spec"].get("jobLabel", ""))
    F.check(job == "ptxserve",
            f"PodMonitor: job label would be {job!r} (jobLabel {pm['spec'].get('jobLabel')}), "
            "the rules expect job=\"ptxserve\"")
    pc = lib.load_yaml(root, lib.PROM_CONFIG)
    F.check([sc["job_name"] for sc in pc["scrape_configs"]] == ["ptxserve"],
            f"{lib.PROM_CONFIG}: job_name must be ptxserve")

    pdb = objs[("PodDisruptionBudget", "ptxserve")]
    F.check(all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items()),
            "PodDisruptionBudget: selector does not match the pod labels")
    hpa = objs[("HorizontalPodAutoscaler", "ptxserve")]
    F.check(hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                              "name": dep["metadata"]["name"]},
            "HPA: scaleTargetRef is not the Deployment")
    F.check(hpa["spec"]["minReplicas"] >= 1 and
            hpa["spec"]["maxReplicas"] >= hpa["spec"]["minReplicas"], "HPA: replica bounds")
    hpa_metrics = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]
                   if m["type"] == "Pods"]
    F.check(hpa_metrics == ["ptxserve_requests_waiting"],
            f"HPA: metrics {hpa_metrics}, expected [ptxserve_requests_waiting]")
    adapter = lib.load_yaml(root, f"{lib.K8S_DIR}/prometheus-adapter-values.yaml")
    rules = adapter["rules"]["custom"]
    served = set()
    for r in rules:
        series = lib.promql_metrics(r["seriesQuery"])
        as_name = r.get("name", {}).get("as") or next(iter(series), None)
        served.add(as_name)
        F.check(re.search(r.get("name", {}).get("matches", ".*"), next(iter(series), "")),
                f"adapter rule: name.matches does not match {series}")
        ov = r["resources"]["overrides"]
        F.check(ov.get("pod", {}).get("resource") == "pod" and
                ov.get("namespace", {}).get("resource") == "namespace",
                "adapter rule: the pod and namespace labels must map to their resources")
        F.check("<<.Series>>" in r["metricsQuery"] and "<<.LabelMatchers>>" in r["metricsQuery"],
                "adapter rule: metricsQuery must use <<.Series>>{<<.LabelMatchers>>}")
        metrics_in_rules |= series
    for m in hpa_metrics:
        F.check(m in served, f"HPA metric {m} is not served by the prometheus-adapter rule")
    metrics_in_rules |= set(hpa_metrics)

    # The Operator copy of the rules equals the rule file.
    pr = objs[("PrometheusRule", "ptxserve")]
    alerts = lib.load_yaml(root, lib.PROM_ALERTS)
    F.check(pr["spec"]["groups"] == alerts["groups"],
            "deploy/kubernetes/prometheusrule.yaml differs from deploy/prometheus/alerts.yml: "
            "run python3 deploy/gen_prometheusrule.py")

    # kubectl's built-in kustomize renders the same objects (optional: no cluster needed).
    kubectl = shutil.which("kubectl")
    if kubectl:
        out = subprocess.run([kubectl, "kustomize", os.path.join(root, lib.K8S_DIR)],
                             capture_output=True, text=True, timeout=60)
        if F.check(out.returncode == 0, f"kubectl kustomize failed:\n{out.stderr}"):
            yaml = lib.import_yaml()
            rendered = {(d["kind"], d["metadata"]["name"]) for d in
                        yaml.safe_load_all(out.stdout) if d}
            F.check(rendered == set(objs), f"kubectl kustomize renders {sorted(rendered)}")
            print(f"kubectl kustomize renders {len(rendered)} objects")
    else:
        print("note: kubectl not found: kustomize rendering not checked")


def check_rules_and_dashboard(root, metrics):
    alerts = lib.load_yaml(root, lib.PROM_ALERTS)
    rules = lib.alert_rules(alerts)
    names = {r["alert"] for r in rules}
    by_metric = {}
    for r in rules:
        F.check(r.get("labels", {}).get("severity") in ("critical", "warning"),
                f"alert {r['alert']}: severity label missing")
        F.check(r.get("annotations", {}).get("summary"), f"alert {r['alert']}: no summary")
        for m in lib.promql_metrics(r["expr"]) | ({"up"} if "up{" in r["expr"] else set()):
            by_metric.setdefault(m, set()).add(r["alert"])
        metrics |= lib.promql_metrics(r["expr"])
    # The issue's six situations, each covered by an alert on the metric that shows it.
    for what, metric in (("server down", "up"), ("queue growing", "ptxserve_requests_waiting"),
                         ("TTFT p99 high", "ptxserve_time_to_first_token_seconds_bucket"),
                         ("KV cache near full", "ptxserve_kv_cache_usage_ratio"),
                         ("kernel cache misses after warm-up",
                          "ptxserve_kernel_cache_misses_total"),
                         ("health NOT_SERVING", "ptxserve_health_serving")):
        F.check(metric in by_metric, f"no alert for {what} (on {metric})")
    print(f"{len(names)} alerts: {sorted(names)}")

    dash = json.loads(lib.read(root, lib.DASHBOARD))
    exprs = lib.dashboard_exprs(dash)
    used = set()
    for title, e in exprs:
        used |= lib.promql_metrics(e)
    metrics |= used
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        metrics |= lib.promql_metrics(q["query"] if isinstance(q, dict) else str(q or ""))
    for what, metric in (("request throughput", "ptxserve_requests_total"),
                         ("token throughput", "ptxserve_generated_tokens_total"),
                         ("TTFT quantiles", "ptxserve_time_to_first_token_seconds_bucket"),
                         ("inter-token latency quantiles",
                          "ptxserve_inter_token_latency_seconds_bucket"),
                         ("batch size", "ptxserve_batch_size_bucket"),
                         ("KV usage", "ptxserve_kv_cache_blocks_used"),
                         ("kernel launches by kernel", "ptxserve_kernel_launches_total"),
                         ("kernel-cache hit ratio", "ptxserve_kernel_cache_hits_total"),
                         ("transfer bytes by direction", "ptxserve_transfer_bytes_total")):
        F.check(metric in used, f"dashboard: no panel for {what} (on {metric})")
    F.check(any("histogram_quantile(0.99, sum by (le) (rate("
                "ptxserve_time_to_first_token_seconds_bucket" in e for _, e in exprs),
            "dashboard: no TTFT p99")
    F.check(any("by (kernel)" in e and "ptxserve_kernel_launches_total" in e for _, e in exprs),
            "dashboard: kernel launches are not broken down by kernel")
    F.check(any("by (direction)" in e and "ptxserve_transfer_bytes_total" in e for _, e in exprs),
            "dashboard: transfer bytes are not broken down by direction")
    ids = []

    def walk(panels):
        for p in panels:
            ids.append(p["id"])
            g = p["gridPos"]
            F.check(g["x"] + g["w"] <= 24, f"dashboard panel {p.get('title')}: wider than 24")
            if p.get("type") != "row":
                F.check(p.get("datasource", {}).get("uid") == "${datasource}",
                        f"dashboard panel {p.get('title')}: data source is not ${{datasource}}")
            walk(p.get("panels", []))

    walk(dash["panels"])
    F.check(len(ids) == len(set(ids)), "dashboard: panel ids are not unique")
    F.check(dash.get("uid") == "ptxserve", "dashboard: uid must be ptxserve (stable links)")
    print(f"dashboard: {len(exprs)} queries in {len(ids)} panels")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--ptxserve", required=True)
    args = ap.parse_args()
    lib.import_yaml()
    root = args.source_dir

    serve_flags, serve_help = lib.help_flags(args.ptxserve, "serve")
    client_flags, _ = lib.help_flags(args.ptxserve, "client")
    if not F.check({"host", "port", "metrics_port", "model"} <= serve_flags,
                   f"`ptxserve serve --help` lists no --host/--port/--metrics-port/--model:\n"
                   f"{serve_help}"):
        F.finish("deploy_manifests")
    # The documented defaults are the ports every deploy file uses.
    ports = {"grpc": int(lib.help_default(serve_help, "port")),
             "http": int(lib.help_default(serve_help, "http_port")),
             "metrics": int(lib.help_default(serve_help, "metrics_port"))}
    print(f"`ptxserve serve --help`: {len(serve_flags)} flags, ports {ports}")

    check_parse(root)
    check_dockerfile(root, args.ptxserve, serve_flags, client_flags, ports)
    check_dockerignore(root)
    check_compose(root, serve_flags, ports)
    metrics = set()
    check_kubernetes(root, serve_flags, ports, metrics)
    check_rules_and_dashboard(root, metrics)
    # The metric names themselves are checked against a live server by
    # deploy_prometheus_test.py; here only that there are some.
    F.check(len(metrics) >= 15, f"only {len(metrics)} metric names found in the deploy files")
    F.finish("deploy_manifests")


if __name__ == "__main__":
    main()
