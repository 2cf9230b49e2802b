"""Shared helpers of the deployment tests: reading the deploy files, the command lines
they give `ptxserve serve`, the flags `ptxserve serve --help` lists, metric names in PromQL,
and `ptxserve serve` / Prometheus subprocesses that die with the test."""

import ctypes
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

SKIP = 77  # ctest SKIP_RETURN_CODE

# Files under test, relative to the source root.
DOCKERFILE = "Dockerfile"
DOCKERIGNORE = ".dockerignore"
COMPOSE = "docker-compose.yml"
K8S_DIR = "deploy/kubernetes"
PROM_CONFIG = "deploy/prometheus/prometheus.yml"
PROM_ALERTS = "deploy/prometheus/alerts.yml"
DASHBOARD = "deploy/grafana/dashboards/ptxserve.json"

# The health service names ptxserve's grpc.health.v1 answers (server/health.h).
HEALTH_SERVICES = {"", "ptxserve.v1.DecodeService"}


def skip_or_fail(reason):
    """Missing tools fail the test in CI (CI=true) and skip it elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        print(f"FAIL (CI=true): {reason}", file=sys.stderr)
        sys.exit(1)
    print(f"SKIP: {reason}", file=sys.stderr)
    sys.exit(SKIP)


def import_yaml():
    try:
        import yaml
    except ImportError as e:
        skip_or_fail(f"PyYAML not importable by {sys.executable}: {e} "
                     "(Debian: apt-get install python3-yaml)")
    return yaml


class Failures:
    """Collects every failed check, so one run reports all of them."""

    def __init__(self):
        self.items = []
        self.checks = 0

    def check(self, cond, what):
        self.checks += 1
        if not cond:
            self.items.append(what)
            print(f"FAIL: {what}", file=sys.stderr)
        return cond

    def finish(self, name):
        if self.items:
            print(f"{name}: {len(self.items)} of {self.checks} checks failed", file=sys.stderr)
            sys.exit(1)
        print(f"{name}: all {self.checks} checks passed")


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


def load_yaml_docs(root, rel):
    yaml = import_yaml()
    return [d for d in yaml.safe_load_all(read(root, rel)) if d is not None]


def load_yaml(root, rel):
    docs = load_yaml_docs(root, rel)
    if len(docs) != 1:
        raise ValueError(f"{rel}: expected one YAML document, found {len(docs)}")
    return docs[0]


def k8s_objects(root):
    """{(kind, name): object} of every manifest in deploy/kubernetes that kustomize lists."""
    kust = load_yaml(root, f"{K8S_DIR}/kustomization.yaml")
    objs = {}
    for res in kust.get("resources", []):
        for doc in load_yaml_docs(root, f"{K8S_DIR}/{res}"):
            objs[(doc["kind"], doc["metadata"]["name"])] = doc
    return objs


# --- Dockerfile -----------------------------------------------------------------------

def dockerfile_instructions(text):
    """[(INSTRUCTION, arguments)] with line continuations joined and comments dropped
    (a comment line inside a continued instruction is skipped, as Docker does)."""
    out = []
    cur = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or not stripped:
            continue  # Docker skips empty lines inside a continued instruction too
        if cur is None:
            cur = stripped
        else:
            cur += " " + stripped
        if cur.endswith("\\"):
            cur = cur[:-1].rstrip()
            continue
        if cur:
            word, _, rest = cur.partition(" ")
            out.append((word.upper(), rest.strip()))
        cur = None
    return out


def dockerfile_stages(text):
    """[{'from': image, 'name': alias, 'instructions': [...]}], ARG defaults declared
    before the first FROM substituted into the image names."""
    args = {}
    stages = []
    for ins, rest in dockerfile_instructions(text):
        if ins == "ARG" and not stages:
            k, _, v = rest.partition("=")
            args[k.strip()] = v.strip()
            continue
        if ins == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""),
                           words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append({"from": image, "name": name, "instructions": []})
            continue
        if stages:
            stages[-1]["instructions"].append((ins, rest))
    return stages


def exec_form(rest):
    """The argv of an exec-form (JSON array) CMD/ENTRYPOINT/HEALTHCHECK CMD."""
    return json.loads(rest)


def healthcheck_argv(rest):
    """HEALTHCHECK [--options] CMD [...] -> ([options], argv)."""
    opts, _, cmd = rest.partition(" CMD ")
    cmd = cmd.strip()
    argv = json.loads(cmd) if cmd.startswith("[") else shlex.split(cmd)
    return opts.split(), argv


def apt_installs(run_args):
    """Package names an `apt-get install` in a RUN line installs."""
    pkgs = []
    for seg in re.split(r"&&|;", run_args):
        words = seg.split()
        if "apt-get" in words and "install" in words:
            pkgs += [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
    return pkgs


# --- command lines and flags -----------------------------------------------------------

def serve_argv(argv):
    """The arguments after `serve` of a full `ptxserve serve ...` argv."""
    if "serve" not in argv:
        raise ValueError(f"not a `ptxserve serve` command line: {argv}")
    return argv[argv.index("serve") + 1:]


def parse_flags(args):
    """[(name with underscores, value or None)] of --name[=value] / --name value args.
    Only the --name=value spelling is used by the deploy files: a bare --name is a boolean."""
    out = []
    for a in args:
        if not a.startswith("--"):
            raise ValueError(f"positional argument {a!r} in a serve command line")
        name, eq, value = a[2:].partition("=")
        out.append((name.replace("-", "_"), value if eq else None))
    return out


def flag_value(args, name):
    vals = [v for n, v in parse_flags(args) if n == name]
    return vals[-1] if vals else None


def help_flags(ptxserve, subcommand):
    """Flag names (underscored) the subcommand's --help lists, and the text."""
    out = subprocess.run([ptxserve, subcommand, "--help"], capture_output=True, text=True,
                         timeout=30)
    text = out.stdout + out.stderr
    names = set(re.findall(r"^\s+--([a-z0-9_]+) \(", text, re.M))
    return names, text


def help_default(help_text, name):
    m = re.search(r"--" + re.escape(name) + r" \(.*?\);\s+default: ([^;]*);", help_text, re.S)
    return m.group(1).strip().strip('"') if m else None


# --- PromQL --------------------------------------------------------------------------

METRIC_RE = re.compile(r"\b(ptxserve_[a-z0-9_]+)\b")


def promql_metrics(expr):
    """ptxserve_* names an expression reads (label values such as job="ptxserve" are not
    names: quoted strings are removed first)."""
    return set(METRIC_RE.findall(re.sub(r'"[^"]*"', '""', expr)))


def grafana_substitute(expr, rate_interval="1m"):
    """A dashboard expression with Grafana's variables replaced for a direct query."""
    expr = expr.replace("$__rate_interval", rate_interval).replace("$__interval", "15s")
    expr = expr.replace("${datasource}", "").replace('=~"$job"', '=~".+"')
    return expr.replace('=~"$instance"', '=~".+"')


def dashboard_exprs(dash):
    """[(panel title, expr)] of every panel target, rows included."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))

    walk(dash.get("panels", []))
    return out


def alert_rules(groups_doc):
    return [r for g in groups_doc["groups"] for r in g["rules"] if "alert" in r]


def parse_exposition(text):
    """({family: type}, {sample names}) of a Prometheus text exposition."""
    types = {}
    samples = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(None, 3)
            types[name] = typ.strip()
        elif line and not line.startswith("#"):
            samples.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    return types, samples


def metric_family(name, types):
    """The family a sample name belongs to (histogram _bucket/_sum/_count), or None."""
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[:-len(suffix)]) in ("histogram", "summary"):
            return name[:-len(suffix)]
    return None


# --- processes -------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # If the test is killed (ctest timeout), its children are killed too.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def popen(argv, **kw):
    return subprocess.Popen(argv, preexec_fn=_die_with_parent, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port, path, timeout=5):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read().decode()


def wait_until(predicate, timeout, period=0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(period)


class Server:
    """`ptxserve serve ARGS` with its printed ports; ready when it prints "ready:"."""

    def __init__(self, ptxserve, args, timeout=60):
        self.args = list(args)
        self.proc = popen([ptxserve, "serve"] + self.args, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
        self.port = None
        self.metrics_port = None
        self.lines = []
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(timeout) or self.port is None or self.proc.poll() is not None:
            log = self.output()
            self.kill()
            raise RuntimeError(f"ptxserve serve {' '.join(self.args)} did not become ready:\n{log}")

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = re.search(r"listening on [0-9.]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            m = re.search(r"metrics on http://[0-9.]+:(\d+)/metrics", line)
            if m:
                self.metrics_port = int(m.group(1))
            if "ready:" in line:
                self._ready.set()
        self._ready.set()

    def output(self):
        return "".join(self.lines)

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    def terminate(self, timeout=60):
        """SIGTERM (the server drains), then its exit code; None if it did not exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
