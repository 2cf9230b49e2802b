#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs: OUT/request/*, OUT/model_dir/* and OUT/gguf/*.

request seeds come from fuzz/seeds/request/: *.json are HTTP bodies (chat-* for
/v1/chat/completions, the others /v1/completions), *.textproto are gRPC messages
(grpc-batch-* a GenerateBatchRequest, the others a GenerateRequest) encoded with protoc.
Each gets the selector byte request_fuzzer.cc reads; chat inputs once per chat template.

model_dir seeds pack model directories in model_dir_fuzzer.cc's format: the shared test
model (its real safetensors header, and a shrunk copy whose weights fit a few KB), small
hand-made ones (byte-level BPE, Qwen2 with biases and shards, Mistral with llama3 RoPE),
every directory given with --model-dir (e.g. synthetic models from make-model), and the
chat templates and interpreter cases of tests/chat as raw --chat-template files.

gguf seeds are small GGUF llama models written here from the format description: a
SentencePiece-style vocabulary (with and without merges) in f32, f16 and q8_0 matrices,
and a byte-level one.
"""
import argparse
import json
import pathlib
import shutil
import struct
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SEP = b"\n===\n"
TEMPLATES = ROOT / "tests" / "chat" / "templates"
DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2}


def request_seeds(out, protoc):
    src = ROOT / "fuzz" / "seeds" / "request"
    n = 0
    for path in sorted(src.iterdir()):
        stem = path.stem
        if path.suffix == ".json":
            payload = path.read_bytes()
            chat = stem.startswith("chat")
            mode = 3 if chat else 2
        elif path.suffix == ".textproto":
            if not protoc:
                continue
            batch = stem.startswith("grpc-batch")
            message = "GenerateBatchRequest" if batch else "GenerateRequest"
            payload = subprocess.run(
                [protoc, f"--encode=ptxserve.v1.{message}", f"--proto_path={ROOT / 'proto'}",
                 "ptxserve/v1/decode.proto"],
                input=path.read_bytes(), stdout=subprocess.PIPE, check=True).stdout
            chat = b"chat" in path.read_bytes()
            mode = 1 if batch else 0
        else:
            continue
        # Chat inputs once per template (1 the test model's, 2 Llama 3.1, 3 Qwen2.5), and
        # once without one (refused).
        for template in (0, 1, 2, 3) if chat else (1,):
            (out / f"{stem}-t{template}").write_bytes(bytes([mode | template << 2]) + payload)
            n += 1
    return n


def read_model_dir(d):
    files = {}
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        p = d / name
        files[name] = p.read_bytes() if p.exists() else None
    weights = d / "model.safetensors"
    if weights.exists():
        with open(weights, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            files["header"] = f.read(n)
    return files


def pack(config, tokenizer, tokenizer_config, weights, index=None, text=None, template=None):
    parts = [config, tokenizer, tokenizer_config, weights, index, text, template]
    while parts[-1] is None:
        parts.pop()
    return SEP.join(p if p is not None else b"" for p in parts)


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False, indent=1).encode()


def llama_tensors(c, dtype, bias=False, tied_as_head=False):
    """A safetensors header (dict) for config dict `c`, tensors packed in order."""
    h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = c.get("head_dim", h // c["num_attention_heads"])
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    shapes = []
    if tied_as_head:
        shapes.append(("lm_head.weight", [v, h]))
    else:
        shapes.append(("model.embed_tokens.weight", [v, h]))
        if not c.get("tie_word_embeddings", False):
            shapes.append(("lm_head.weight", [v, h]))
    shapes.append(("model.norm.weight", [h]))
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", [h]), (p + "self_attn.q_proj.weight", [q, h]),
                   (p + "self_attn.k_proj.weight", [kv, h]),
                   (p + "self_attn.v_proj.weight", [kv, h]),
                   (p + "self_attn.o_proj.weight", [h, q])]
        if bias:
            shapes += [(p + "self_attn.q_proj.bias", [q]), (p + "self_attn.k_proj.bias", [kv]),
                       (p + "self_attn.v_proj.bias", [kv])]
        shapes += [(p + "post_attention_layernorm.weight", [h]),
                   (p + "mlp.gate_proj.weight", [inter, h]), (p + "mlp.up_proj.weight", [inter, h]),
                   (p + "mlp.down_proj.weight", [h, inter])]
    header, at = {}, 0
    if tied_as_head:
        header["__metadata__"] = {"format": "pt", "model.embed_tokens.weight": "lm_head.weight"}
    for name, shape in shapes:
        n = DTYPE_SIZE[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + n]}
        at += n
    return header


def byte_char(b):
    printable = 33 <= b <= 126 or 161 <= b <= 172 or b >= 174
    if printable:
        return chr(b)
    return chr(256 + sum(1 for x in range(b) if not (33 <= x <= 126 or 161 <= x <= 172 or x >= 174)))


def byte_level_tokenizer():
    """GPT-2 / Llama 3 style: 256 byte tokens, a few merges, the Llama 3 split regex."""
    vocab = {byte_char(b): b for b in range(256)}
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("l", "l"), ("ll", "o"), ("H", "e"),
                 ("He", "llo"), ("'", "s"), ("1", "2"), ("Ġ", "w"), ("o", "r")]:
        vocab[a + b] = len(vocab)
        merges.append(f"{a} {b}")
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    return {
        "version": "1.0",
        "added_tokens": [{"id": 267, "content": "<|endoftext|>", "special": True,
                          "normalized": False, "lstrip": False, "rstrip": False,
                          "single_word": False},
                         {"id": 268, "content": "<|im_start|>", "special": True,
                          "normalized": False, "lstrip": False, "rstrip": False,
                          "single_word": False}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                  "byte_fallback": False, "vocab": vocab, "merges": merges},
    }


def shrunk_tinystories(tok, keep):
    """The test model's tokenizer cut to its first `keep` ids, plus <0xNN> byte tokens."""
    model = tok["model"]
    vocab = {t: i for t, i in model["vocab"].items() if i < keep}
    merges = [m for m in model["merges"]
              if all(p in vocab for p in (m.split(" ") if isinstance(m, str) else m))
              and "".join(m.split(" ") if isinstance(m, str) else m) in vocab]
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = keep + b
    small = dict(tok)
    small["model"] = dict(model, vocab=vocab, merges=merges, byte_fallback=True)
    return small


def small_llama(vocab, **extra):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
         "intermediate_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1,
         "num_hidden_layers": 1, "vocab_size": vocab, "max_position_embeddings": 64,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
         "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float16"}
    c.update(extra)
    return c


def model_dir_seeds(out, shared, extra_dirs):
    seeds = {}
    tiny_dir = shared / "tinystories-656k"
    test_template = (ROOT / "tests" / "http" / "chat_template.jinja").read_text()
    if tiny_dir.exists():
        real = read_model_dir(tiny_dir)
        # The real header without its 2.6 MB of data: raw mode, offsets past the end.
        header = struct.pack("<Q", len(real["header"])) + real["header"]
        seeds["tinystories-real"] = pack(real["config.json"], real["tokenizer.json"],
                                         real["tokenizer_config.json"], header)
        tok = json.loads(real["tokenizer.json"])
        tok_config = json.loads(real["tokenizer_config.json"])
        tok_config["chat_template"] = test_template
        small = shrunk_tinystories(tok, 300)
        c = small_llama(300 + 256)
        seeds["tinystories-small"] = pack(
            dumps(c), dumps(small), dumps(tok_config), dumps(llama_tensors(c, "F16")),
            text="Once upon a time \u00e9\u4e16 <|end_story|>".encode())
        # Llama 3 RoPE scaling, F32, tied weights stored as lm_head only (the alias in
        # __metadata__), a list of named chat templates.
        c = small_llama(300 + 256, torch_dtype="float32", eos_token_id=[2, 1],
                        rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 32})
        named = dict(tok_config)
        named["chat_template"] = [
            {"name": "default", "template": (TEMPLATES / "zephyr.jinja").read_text()},
            {"name": "tool_use", "template": (TEMPLATES / "llama-3.1-instruct.jinja").read_text()}]
        seeds["tinystories-llama3rope"] = pack(dumps(c), dumps(small), dumps(named),
                                               dumps(llama_tensors(c, "F32", tied_as_head=True)))

    # Byte-level BPE with Qwen2's biases, untied, BF16, sharded, sliding window.
    bl = byte_level_tokenizer()
    bl_config = {"bos_token": None, "eos_token": "<|endoftext|>",
                 "chat_template": (TEMPLATES / "qwen2.5-instruct.jinja").read_text()}
    c = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8,
         "intermediate_size": 12, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "vocab_size": 272, "max_position_embeddings": 128,
         "sliding_window": 32, "use_sliding_window": True, "rope_theta": 1000000.0,
         "tie_word_embeddings": False, "eos_token_id": 267, "torch_dtype": "bfloat16"}
    header = llama_tensors(c, "BF16", bias=True)
    index = {"metadata": {"total_size": 0},
             "weight_map": {k: "model-00001-of-00001.safetensors" for k in header}}
    seeds["bytelevel-qwen2-sharded"] = pack(dumps(c), dumps(bl), dumps(bl_config), dumps(header),
                                            index=dumps(index),
                                            text="Hello the world's 123456! <|im_start|>".encode())
    # Mistral, interleaved head_dim, llama-3.1's template.
    c = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 8,
         "intermediate_size": 8, "num_attention_heads": 2, "num_key_value_heads": 2,
         "head_dim": 8, "num_hidden_layers": 1, "vocab_size": 270,
         "max_position_embeddings": 256, "sliding_window": None, "rope_scaling":
         {"type": "linear", "factor": 2.0}, "tie_word_embeddings": True,
         "torch_dtype": "float32"}
    bl_config = {"bos_token": "<|endoftext|>", "add_bos_token": True,
                 "chat_template": (TEMPLATES / "llama-3.1-instruct.jinja").read_text()}
    seeds["bytelevel-mistral"] = pack(dumps(c), dumps(bl), dumps(bl_config),
                                      dumps(llama_tensors(c, "F32")))

    # Every test template raw (--chat-template), beside a small model, so that mutations
    # reach the Jinja lexer, parser and evaluator without breaking a JSON string first.
    for t in sorted(TEMPLATES.glob("*.jinja")):
        seeds[f"template-{t.stem}"] = pack(b"", b"", b"", b"", template=t.read_bytes())
    # And the interpreter's test cases (their templates; the target renders a fixed chat).
    cases = json.loads((ROOT / "tests" / "chat" / "interpreter_cases.json").read_text())
    for case in cases:
        seeds[f"jinja-{case['name']}"] = pack(b"", b"", b"", b"", template=case["template"].encode())
    for d in extra_dirs:
        files = read_model_dir(d)
        seeds[d.name] = pack(files["config.json"], files["tokenizer.json"],
                             files["tokenizer_config.json"], files.get("header"))
    for name, data in seeds.items():
        (out / name).write_bytes(data)
    return len(seeds)


GGUF_STRING, GGUF_ARRAY = 8, 9
GGUF_SCALAR = {"u32": (4, "<I"), "i32": (5, "<i"), "f32": (6, "<f"), "bool": (7, "<?")}


def gguf_value(kind, v):
    """(type id, bytes) of one metadata value: kind is a scalar name, "str", or
    ("arr", element kind)."""
    if kind == "str":
        b = v.encode()
        return GGUF_STRING, struct.pack("<Q", len(b)) + b
    if isinstance(kind, tuple):
        elems = [gguf_value(kind[1], x) for x in v]
        elem_type = GGUF_STRING if kind[1] == "str" else GGUF_SCALAR[kind[1]][0]
        return GGUF_ARRAY, struct.pack("<IQ", elem_type, len(v)) + b"".join(e[1] for e in elems)
    t, fmt = GGUF_SCALAR[kind]
    return t, struct.pack(fmt, v)


def gguf_file(kvs, tensors):
    """kvs: [(key, kind, value)]; tensors: [(name, ne, ggml type, bytes)], aligned to 32."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, kind, v in kvs:
        t, b = gguf_value(kind, v)
        out += gguf_value("str", key)[1] + struct.pack("<I", t) + b
    offset, data = 0, b""
    for name, ne, ggml_type, payload in tensors:
        out += gguf_value("str", name)[1] + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", ggml_type, offset)
        data += payload + b"\0" * (-len(payload) % 32)
        offset = len(data)
    return out + b"\0" * (-len(out) % 32) + data


def gguf_llama(hidden, ffn, layers, heads, kv_heads, vocab, matrix_type, tokenizer_kvs):
    """A small llama GGUF: f32 norms, matrices of ggml type 0 (f32), 1 (f16) or 8 (q8_0)."""
    head_dim = hidden // heads

    def matrix(rows, cols):
        if matrix_type == 0:
            return struct.pack(f"<{rows * cols}f", *[((i % 7) - 3) / 8 for i in range(rows * cols)])
        if matrix_type == 1:
            return struct.pack(f"<{rows * cols}e", *[((i % 7) - 3) / 8 for i in range(rows * cols)])
        block = struct.pack("<e", 0.01) + bytes((i * 5) % 256 for i in range(32))
        return block * (rows * cols // 32)

    def norm():
        return struct.pack(f"<{hidden}f", *([1.0] * hidden))

    tensors = [("token_embd.weight", [hidden, vocab], matrix_type, matrix(vocab, hidden)),
               ("output_norm.weight", [hidden], 0, norm())]
    for i in range(layers):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", [hidden], 0, norm()),
                    (p + "attn_q.weight", [hidden, hidden], matrix_type, matrix(hidden, hidden)),
                    (p + "attn_k.weight", [hidden, kv_heads * head_dim], matrix_type,
                     matrix(kv_heads * head_dim, hidden)),
                    (p + "attn_v.weight", [hidden, kv_heads * head_dim], matrix_type,
                     matrix(kv_heads * head_dim, hidden)),
                    (p + "attn_output.weight", [hidden, hidden], matrix_type,
                     matrix(hidden, hidden)),
                    (p + "ffn_norm.weight", [hidden], 0, norm()),
                    (p + "ffn_gate.weight", [hidden, ffn], matrix_type, matrix(ffn, hidden)),
                    (p + "ffn_up.weight", [hidden, ffn], matrix_type, matrix(ffn, hidden)),
                    (p + "ffn_down.weight", [ffn, hidden], matrix_type, matrix(hidden, ffn))]
    kvs = [("general.architecture", "str", "llama"), ("general.name", "str", "seed"),
           ("llama.context_length", "u32", 64), ("llama.embedding_length", "u32", hidden),
           ("llama.block_count", "u32", layers), ("llama.feed_forward_length", "u32", ffn),
           ("llama.attention.head_count", "u32", heads),
           ("llama.attention.head_count_kv", "u32", kv_heads),
           ("llama.rope.dimension_count", "u32", head_dim),
           ("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5),
           ("llama.rope.freq_base", "f32", 10000.0)] + tokenizer_kvs
    return gguf_file(kvs, tensors)


def gguf_seeds(out):
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    words = ["\u2581", "a", "b", "c", "\u2581a", "\u2581ab", "bc", "\u2581abc"]
    tokens = specials + byte_tokens + words
    types = [2, 3, 3] + [6] * 256 + [1] * len(words)
    scores = [0.0] * (3 + 256) + [-8.0, -8.0, -8.0, -8.0, 0.0, -1.0, -2.0, -3.0]
    merges = ["\u2581 a", "\u2581a b", "b c", "\u2581ab c"]
    spm = [("tokenizer.ggml.model", "str", "llama"), ("tokenizer.ggml.tokens", ("arr", "str"), tokens),
           ("tokenizer.ggml.scores", ("arr", "f32"), scores),
           ("tokenizer.ggml.token_type", ("arr", "i32"), types),
           ("tokenizer.ggml.bos_token_id", "u32", 1), ("tokenizer.ggml.eos_token_id", "u32", 2),
           ("tokenizer.ggml.unknown_token_id", "u32", 0),
           ("tokenizer.ggml.add_bos_token", "bool", True),
           ("tokenizer.chat_template", "str", "{% for m in messages %}{{ m['content'] }}{% endfor %}")]
    vocab = len(tokens)
    seeds = {
        "spm-f32": gguf_llama(8, 12, 1, 2, 1, vocab, 0, spm + [("tokenizer.ggml.merges", ("arr", "str"), merges)]),
        "spm-f16-scores-only": gguf_llama(8, 12, 2, 2, 2, vocab, 1, spm),
        "spm-q8_0": gguf_llama(32, 64, 1, 4, 2, vocab, 8, spm),
    }
    gpt2_tokens = [byte_char(b) for b in range(256)]
    gpt2 = [("tokenizer.ggml.model", "str", "gpt2"), ("tokenizer.ggml.pre", "str", "llama-bpe"),
            ("tokenizer.ggml.tokens", ("arr", "str"), gpt2_tokens + ["ab"]),
            ("tokenizer.ggml.merges", ("arr", "str"), ["a b"]),
            ("tokenizer.ggml.eos_token_id", "u32", 3)]
    seeds["gpt2-f32"] = gguf_llama(8, 12, 1, 2, 1, 257, 0, gpt2)
    for name, data in seeds.items():
        (out / name).write_bytes(data)
    return len(seeds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--shared-models", type=pathlib.Path, default=ROOT.parent / "shared" / "models")
    ap.add_argument("--model-dir", type=pathlib.Path, action="append", default=[])
    args = ap.parse_args()
    protoc = shutil.which("protoc")
    if not protoc:
        print("seeds.py: no protoc: the gRPC request seeds are left out", file=sys.stderr)
    for sub in ("request", "model_dir", "gguf"):
        shutil.rmtree(args.out / sub, ignore_errors=True)
        (args.out / sub).mkdir(parents=True)
    n = request_seeds(args.out / "request", protoc)
    m = model_dir_seeds(args.out / "model_dir", args.shared_models, args.model_dir)
    g = gguf_seeds(args.out / "gguf")
    print(f"seeds.py: {n} request, {m} model_dir and {g} gguf seeds in {args.out}")


if __name__ == "__main__":
    main()
