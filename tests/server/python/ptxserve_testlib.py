"""Shared helpers of the Python server tests: skip rules, stub generation, and a
`ptxserve serve` subprocess on free loopback ports."""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77  # ctest SKIP_RETURN_CODE


def skip_or_fail(reason):
    """Missing tools fail the test in CI (CI=true) and skip it elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        print(f"FAIL (CI=true): {reason}", file=sys.stderr)
        sys.exit(1)
    print(f"SKIP: {reason}", file=sys.stderr)
    sys.exit(SKIP)


def import_grpc():
    try:
        import grpc  # noqa: F401
        import google.protobuf  # noqa: F401
    except ImportError as e:
        skip_or_fail(f"python grpcio/protobuf not importable by {sys.executable}: {e} "
                     "(Debian: apt-get install python3-grpcio python3-protobuf)")


def generate_stubs(proto_root, here, out_dir):
    """Generates Python messages and stubs for the ptxserve, health and reflection protos
    into out_dir and puts it on sys.path. The health and reflection protos are copied to
    paths outside `grpc/` so their modules do not collide with the grpc package."""
    src = os.path.join(out_dir, "src")
    os.makedirs(os.path.join(src, "ptxserve", "v1"))
    os.makedirs(os.path.join(src, "ptx_health"))
    os.makedirs(os.path.join(src, "ptx_reflection"))
    shutil.copy(os.path.join(proto_root, "ptxserve", "v1", "decode.proto"),
                os.path.join(src, "ptxserve", "v1", "decode.proto"))
    shutil.copy(os.path.join(proto_root, "grpc", "health", "v1", "health.proto"),
                os.path.join(src, "ptx_health", "health.proto"))
    shutil.copy(os.path.join(here, "reflection.proto"),
                os.path.join(src, "ptx_reflection", "reflection.proto"))
    protos = ["ptxserve/v1/decode.proto", "ptx_health/health.proto",
              "ptx_reflection/reflection.proto"]
    gen = os.path.join(out_dir, "gen")
    os.makedirs(gen)
    try:
        import grpc_tools  # noqa: F401
        cmd = [sys.executable, "-m", "grpc_tools.protoc"]
        plugin = []
    except ImportError:
        protoc = shutil.which("protoc")
        plugin_path = shutil.which("grpc_python_plugin")
        if not protoc or not plugin_path:
            skip_or_fail("neither grpc_tools nor protoc + grpc_python_plugin found "
                         "(Debian: protobuf-compiler, protobuf-compiler-grpc)")
        cmd = [protoc]
        plugin = [f"--plugin=protoc-gen-grpc_python={plugin_path}"]
    subprocess.run(cmd + plugin + [f"--proto_path={src}", f"--python_out={gen}",
                                   f"--grpc_python_out={gen}"] + protos, check=True)
    for d in ("ptxserve", "ptxserve/v1", "ptx_health", "ptx_reflection"):
        open(os.path.join(gen, d, "__init__.py"), "a").close()
    sys.path.insert(0, gen)


def model_args(shared_models):
    model = os.path.join(shared_models, "tinystories-656k")
    if os.path.exists(os.path.join(model, "model.safetensors")):
        return ["--model", model]
    return []  # the synthetic default model


class Server:
    """`ptxserve serve` on free ports; stdout is parsed for the ports and readiness."""

    def __init__(self, ptxserve, extra_args=(), shared_models=""):
        self.tmp = tempfile.mkdtemp(prefix="ptxserve-test-")
        args = [ptxserve, "serve", "--port", "0", "--metrics-port", "0", "--http-port", "0",
                "--model-cache-dir", os.path.join(self.tmp, "cache")]
        args += model_args(shared_models) + list(extra_args)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.port = None
        self.metrics_port = None
        self.lines = []
        self.stderr_lines = []
        self._ready = threading.Event()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        if not self._ready.wait(60) or self.port is None:
            self.kill()
            raise RuntimeError("server did not become ready:\n" + "".join(self.lines) +
                               "".join(self.stderr_lines))

    def _read_stdout(self):
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

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    def terminate(self, timeout=60):
        """SIGTERM, then the exit code (the server drains first)."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def http_get(port, path="/metrics", timeout=5):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read().decode()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout, period=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(period)
    return predicate()
