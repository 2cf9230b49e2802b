#!/usr/bin/env python3
"""`ptxserve bench`'s prefix-cache workloads against a `ptxserve serve` subprocess, with
prefix caching on and off: the shared-prefix workload (--shared-prefix-len) and the
multi-turn chat (--turns) report exactly the prompt tokens the cache should hold, and
none with caching off.

usage: bench_workloads_test.py --ptxserve BIN [--shared-models DIR]"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ptxserve_testlib as lib  # noqa: E402

BLOCK = 16  # the server's default --block-size


def bench(ptxserve, target, *flags):
    """Runs bench with one worker (so each request follows the previous one); its JSON."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        run = subprocess.run([ptxserve, "bench", "--target", target, "--concurrency", "1",
                              "--temperature", "0", "--json", out.name, *flags],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "prefix cache" in run.stdout, run.stdout
        return json.load(open(out.name))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptxserve", required=True)
    ap.add_argument("--shared-models", default="")
    args = ap.parse_args()

    for caching in (True, False):
        srv = lib.Server(args.ptxserve, [f"--prefix-caching={str(caching).lower()}"],
                         shared_models=args.shared_models)
        try:
            # 4 requests: a 64-token prefix (4 blocks) in common and 8 tokens of their own.
            # Every request after the first finds the 4 blocks.
            shared = bench(args.ptxserve, srv.target, "--requests", "4", "--shared-prefix-len",
                           "64", "--prompt-len", "8", "--max-tokens", "4")
            assert shared["ok"] == 4 and shared["requests"] == 4, shared
            assert shared["prompt_tokens"] == 4 * 72, shared
            want = 3 * 64 if caching else 0
            assert shared["cached_prompt_tokens"] == want, (caching, shared)

            # 2 chats of 2 turns: turn 1 sends 20 tokens and gets 6 back (the K/V of 25 of
            # them computed: one full block); turn 2 sends those 26 and 20 more and finds
            # that block.
            chat = bench(args.ptxserve, srv.target, "--requests", "2", "--turns", "2",
                         "--prompt-len", "20", "--max-tokens", "6")
            assert chat["ok"] == 4 and chat["requests"] == 4, chat
            assert chat["turns"] == 2, chat
            assert chat["prompt_tokens"] == 2 * (20 + 46), chat
            want = 2 * BLOCK if caching else 0
            assert chat["cached_prompt_tokens"] == want, (caching, chat)
            print(f"caching={caching}: shared prefix {shared['prefix_cache_hit_rate']:.3f}, "
                  f"chat {chat['prefix_cache_hit_rate']:.3f} of prompt tokens cached")
        finally:
            srv.kill()
    print("OK")


if __name__ == "__main__":
    main()
