#!/usr/bin/env python3
"""An independent client (Python grpcio, stubs generated from the proto files at test
time) against a `ptxserve serve` subprocess: streaming, batch, validation, health,
reflection, the C++ client agreeing with it, and a SIGTERM drain that exits 0.

usage: python_client_test.py --ptxserve BIN --proto-dir DIR --shared-models DIR"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ptxserve_testlib as lib  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptxserve", required=True)
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--shared-models", default="")
    args = ap.parse_args()
    lib.import_grpc()
    import grpc
    from google.protobuf import descriptor_pb2

    tmp = tempfile.mkdtemp(prefix="ptxserve-stubs-")
    lib.generate_stubs(args.proto_dir, HERE, tmp)
    from ptxserve.v1 import decode_pb2 as pb
    from ptxserve.v1 import decode_pb2_grpc as pb_grpc
    from ptx_health import health_pb2, health_pb2_grpc
    from ptx_reflection import reflection_pb2, reflection_pb2_grpc

    srv = lib.Server(args.ptxserve, extra_args=["--log-format", "json"],
                     shared_models=args.shared_models)
    try:
        channel = grpc.insecure_channel(srv.target)
        stub = pb_grpc.DecodeServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)

        # Health: SERVING once ready.
        resp = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING, resp
        rc = subprocess.run([args.ptxserve, "client", "health", "--target", srv.target]).returncode
        assert rc == 0, f"ptxserve client health exited {rc} while SERVING"

        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        assert info.vocab_size > 0 and info.context_length > 0 and info.backend == "cpu", info

        # Streaming, greedy: several messages, text deltas, final usage.
        req = pb.GenerateRequest(text="Once upon a time",
                                 stopping=pb.StoppingCriteria(max_new_tokens=400, ignore_eos=True))
        msgs = list(stub.Generate(req, timeout=60))
        assert len(msgs) > 1, f"expected a stream, got {len(msgs)} message(s)"
        tokens = [t for m in msgs for t in m.token_ids]
        text = "".join(m.text for m in msgs)
        last = msgs[-1]
        assert len(tokens) == 400, len(tokens)
        assert last.finish_reason == pb.FINISH_REASON_LENGTH, last
        assert last.usage.generated_tokens == 400 and last.usage.prompt_tokens > 0, last.usage
        assert all(m.finish_reason == pb.FINISH_REASON_UNSPECIFIED for m in msgs[:-1])
        assert text, "no text streamed"

        # One structured log line per finished request (--log-format json).
        def request_lines():
            out = []
            for line in list(srv.stderr_lines):
                try:
                    j = json.loads(line)
                except ValueError:
                    continue  # gRPC's own lines are not ours to format
                if j.get("msg") == "request finished":
                    out.append(j)
            return out
        assert lib.wait_until(lambda: request_lines(), 10), srv.stderr_lines
        logged = request_lines()[0]
        assert logged["api"] == "grpc" and logged["generated_tokens"] == 400, logged
        assert logged["prompt_tokens"] == last.usage.prompt_tokens, logged
        assert logged["finish"] == "length" and logged["id"].startswith("ptx-"), logged
        assert "127.0.0.1" in logged["peer"] and logged["ttft_ms"] > 0, logged

        # The C++ client prints prompt + the same continuation.
        out = subprocess.run([args.ptxserve, "client", "generate", "--target", srv.target,
                              "--prompt", "Once upon a time", "--temperature", "0",
                              "--max-tokens", "400", "--ignore-eos"],
                             capture_output=True, text=True, check=True).stdout
        assert out == "Once upon a time" + text + "\n", (out, text)

        # Seeded sampling repeats.
        sreq = pb.GenerateRequest(token_ids=pb.TokenIds(ids=[5, 6, 7, 8]),
                                  sampling=pb.SamplingParams(temperature=1.0, top_p=0.9, seed=7),
                                  stopping=pb.StoppingCriteria(max_new_tokens=20, ignore_eos=True))
        a = [t for m in stub.Generate(sreq, timeout=60) for t in m.token_ids]
        b = [t for m in stub.Generate(sreq, timeout=60) for t in m.token_ids]
        assert a == b and len(a) == 20, (a, b)

        # n samples: sample i repeats the request seeded 7 + i; the prompt counts once.
        nreq = pb.GenerateRequest()
        nreq.CopyFrom(sreq)
        nreq.n = 3
        samples = {0: [], 1: [], 2: []}
        usage = {}
        for m in stub.Generate(nreq, timeout=60):
            samples[m.sample_index].extend(m.token_ids)
            if m.finish_reason != pb.FINISH_REASON_UNSPECIFIED:
                usage[m.sample_index] = (m.usage.prompt_tokens, m.usage.generated_tokens)
        assert usage == {0: (4, 20), 1: (0, 20), 2: (0, 20)}, usage
        assert samples[0] == a, (samples[0], a)
        for i in (1, 2):
            lone = pb.GenerateRequest()
            lone.CopyFrom(sreq)
            lone.sampling.seed = 7 + i
            assert samples[i] == [t for m in stub.Generate(lone, timeout=60) for t in m.token_ids]

        # Batch: every index finishes once and matches its single run.
        breq = pb.GenerateBatchRequest(requests=[sreq, req])
        got = {0: [], 1: []}
        finals = {0: 0, 1: 0}
        for m in stub.GenerateBatch(breq, timeout=60):
            got[m.index].extend(m.response.token_ids)
            if m.response.finish_reason != pb.FINISH_REASON_UNSPECIFIED:
                finals[m.index] += 1
        assert finals == {0: 1, 1: 1}, finals
        assert got[0] == a and got[1] == tokens, got

        # Validation: INVALID_ARGUMENT naming the field.
        bad = pb.GenerateRequest(token_ids=pb.TokenIds(ids=[5]),
                                 sampling=pb.SamplingParams(top_p=1.5))
        try:
            list(stub.Generate(bad, timeout=10))
            raise AssertionError("top_p=1.5 was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
            assert "sampling.top_p" in e.details(), e.details()

        # Reflection: what grpcurl uses without proto files.
        refl = reflection_pb2_grpc.ServerReflectionStub(channel)
        reqs = [reflection_pb2.ServerReflectionRequest(list_services=""),
                reflection_pb2.ServerReflectionRequest(
                    file_containing_symbol="ptxserve.v1.DecodeService")]
        responses = list(refl.ServerReflectionInfo(iter(reqs), timeout=10))
        services = {s.name for s in responses[0].list_services_response.service}
        assert "ptxserve.v1.DecodeService" in services, services
        assert "grpc.health.v1.Health" in services, services
        fd = descriptor_pb2.FileDescriptorProto.FromString(
            responses[1].file_descriptor_response.file_descriptor_proto[0])
        assert fd.package == "ptxserve.v1", fd.package
        assert any(s.name == "DecodeService" for s in fd.service)

        # Graceful shutdown: SIGTERM while a long batch streams; it finishes, exit 0.
        long_req = pb.GenerateBatchRequest(requests=[
            pb.GenerateRequest(token_ids=pb.TokenIds(ids=[5 + i, 9, 11]),
                               sampling=pb.SamplingParams(temperature=1.0, seed=i),
                               stopping=pb.StoppingCriteria(max_new_tokens=300, ignore_eos=True))
            for i in range(32)])
        first = threading.Event()
        result = {"finals": 0, "tokens": 0, "error": None}

        def consume():
            try:
                for m in stub.GenerateBatch(long_req, timeout=120):
                    result["tokens"] += len(m.response.token_ids)
                    first.set()
                    if m.response.finish_reason == pb.FINISH_REASON_LENGTH:
                        result["finals"] += 1
            except grpc.RpcError as e:
                result["error"] = e
            first.set()

        t = threading.Thread(target=consume)
        t.start()
        assert first.wait(60)
        code = srv.terminate()
        t.join(60)
        assert result["error"] is None, result["error"]
        assert result["finals"] == 32 and result["tokens"] == 32 * 300, result
        assert code == 0, f"exit code {code}"
        assert any("stopped" in line for line in srv.lines), srv.lines
        print("python client test: OK")
    finally:
        srv.kill()


if __name__ == "__main__":
    main()
