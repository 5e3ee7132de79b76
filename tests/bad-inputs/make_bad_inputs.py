#!/usr/bin/env python3
"""Writes the bad-input corpus (committed; kept here for provenance).

Each case is a model folder <case>/ with config.json, weights and expect.txt:
  stage: config | weights | model | runtime   (which loader step must refuse it; runtime: rlx_model_open)
  expect: <text the one-line error must contain>
  check: <tensor> <d0,d1,...>       (stage model: the tensor whose shape/presence is wrong)
inputs/<case>.safetensors are bad files for `rlx-run forward --inputs`, with
inputs/<case>.expect holding the expected text. good-micro/ is a valid tiny LLaMA.
"""
import json, os, random, shutil, struct

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(1234)

MICRO = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
    "intermediate_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
    "num_hidden_layers": 1, "vocab_size": 16, "max_position_embeddings": 32,
    "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "dtype": "float32",
}

def micro_tensors():
    t = [("model.embed_tokens.weight", [16, 8]), ("model.norm.weight", [8])]
    p = "model.layers.0."
    t += [(p + "input_layernorm.weight", [8]), (p + "post_attention_layernorm.weight", [8]),
          (p + "self_attn.q_proj.weight", [8, 8]), (p + "self_attn.k_proj.weight", [4, 8]),
          (p + "self_attn.v_proj.weight", [4, 8]), (p + "self_attn.o_proj.weight", [8, 8]),
          (p + "mlp.gate_proj.weight", [16, 8]), (p + "mlp.up_proj.weight", [16, 8]),
          (p + "mlp.down_proj.weight", [8, 16])]
    return t

def numel(s):
    n = 1
    for d in s:
        n *= d
    return n

def st_bytes(tensors, dtype="F32"):
    """tensors: [(name, shape)] -> a valid safetensors image with random data."""
    hdr, data = {"__metadata__": {"format": "pt"}}, b""
    for name, shape in tensors:
        n = numel(shape)
        if dtype == "I32":
            raw = struct.pack("<%di" % n, *[rng.randrange(16) for _ in range(n)])
        else:
            raw = struct.pack("<%df" % n, *[rng.uniform(-0.5, 0.5) for _ in range(n)])
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return raw_header(json.dumps(hdr, separators=(",", ":")).encode()) + data

def raw_header(h, length=None):
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h) if length is None else length) + h

def case(name, stage, expect, weights=None, config=MICRO, check=None, files=None):
    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    if config is not None:
        with open(os.path.join(d, "config.json"), "wb") as f:
            f.write(config if isinstance(config, bytes) else (json.dumps(config, indent=2) + "\n").encode())
    if weights is not None:
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(weights)
    for fn, content in (files or {}).items():
        with open(os.path.join(d, fn), "wb") as f:
            f.write(content)
    with open(os.path.join(d, "expect.txt"), "w") as f:
        f.write("stage: %s\nexpect: %s\n" % (stage, expect))
        if check:
            f.write("check: %s %s\n" % (check[0], ",".join(str(x) for x in check[1])))

good = st_bytes(micro_tensors())
case("good-micro", "none", "", weights=good)

# ---- safetensors structure
case("st-empty", "weights", "too small for a safetensors header", weights=b"")
case("st-truncated-header", "weights", "too small for a safetensors header", weights=good[:5])
case("st-truncated-data", "weights", "past the end of the data section", weights=good[: len(good) * 2 // 3])
case("st-header-len-2e63", "weights", "header length 9223372036854775808 exceeds the file size",
     weights=struct.pack("<Q", 1 << 63) + good[8:])
case("st-header-len-past-end", "weights", "exceeds the file size",
     weights=struct.pack("<Q", len(good)) + good[8:])
def hdr(d):
    return json.dumps(d, separators=(",", ":")).encode()
case("st-offsets-past-end", "weights",
     "'model.norm.weight': data_offsets [0, 4096] past the end of the data section (32 bytes)",
     weights=raw_header(hdr({"model.norm.weight": {"dtype": "F32", "shape": [1024], "data_offsets": [0, 4096]}})) + bytes(32))
case("st-overlap", "weights", "overlap",
     weights=raw_header(hdr({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                             "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})) + bytes(24))
case("st-garbage", "weights", "header length",
     weights=bytes(rng.randrange(256) for _ in range(4096)))
case("st-garbage-json", "weights", "invalid JSON",
     weights=raw_header(bytes(rng.choice(b"{}[]:,\"abc0123 ") for _ in range(256))) + bytes(64))
case("st-non-utf8-name", "weights", "invalid JSON",
     weights=raw_header(b'{"model.\xff\xfe.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}') + bytes(4))
case("st-deep-nesting", "weights", "maximum parsing depth",
     weights=raw_header(b'{"a":' + b"[" * 100000 + b"]" * 100000 + b"}"))
case("st-huge-dims", "weights", "overflows the address space",
     weights=raw_header(hdr({"model.embed_tokens.weight": {"dtype": "F32", "shape": [1 << 62, 1 << 62], "data_offsets": [0, 16]}})) + bytes(16))
case("st-size-mismatch", "weights", "'x': F32 [4, 4] needs 64 bytes, data_offsets give 32",
     weights=raw_header(hdr({"x": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 32]}})) + bytes(64))
case("st-bad-dtype", "weights", "tensor 'model.norm.weight': dtype F64 is not supported",
     weights=raw_header(hdr({"model.norm.weight": {"dtype": "F64", "shape": [8], "data_offsets": [0, 64]}})) + bytes(64))
case("st-duplicate-names", "weights", "duplicate object key",
     weights=raw_header(b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}') + bytes(8))
case("st-not-object", "weights", "header: expected an object, got an array", weights=raw_header(b"[1,2,3]"))
case("st-too-many-dims", "weights", "7 dimensions, at most 6",
     weights=raw_header(hdr({"w": {"dtype": "F32", "shape": [1] * 7, "data_offsets": [0, 4]}})) + bytes(8))
case("st-negative-offset", "weights", "data_offsets must be two integers",
     weights=raw_header(hdr({"w": {"dtype": "U8", "shape": [4], "data_offsets": [-1, 3]}})) + bytes(8))
case("st-unknown-field", "weights", "tensor 'w': unknown key 'strides'",
     weights=raw_header(hdr({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4], "strides": [1]}})) + bytes(8))

# ---- sharded checkpoints
idx = {"metadata": {"total_size": 0}, "weight_map": {"model.norm.weight": "../../../etc/passwd"}}
case("index-escape", "weights", "weight_map.model.norm.weight: expected a shard file name in the same folder",
     files={"model.safetensors.index.json": hdr(idx)})
idx = {"metadata": {}, "weight_map": {n: "model-00001-of-00002.safetensors" for n, _ in micro_tensors()}}
idx["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors"
case("index-missing-shard", "weights", "model-00002-of-00002.safetensors: No such file",
     files={"model.safetensors.index.json": hdr(idx), "model-00001-of-00002.safetensors": good})

# ---- model level: the file is sound, the contents disagree with config.json
case("missing-tensor", "model", "model.layers.0.mlp.up_proj.weight",
     weights=st_bytes([t for t in micro_tensors() if t[0] != "model.layers.0.mlp.up_proj.weight"]),
     check=("model.layers.0.mlp.up_proj.weight", [16, 8]))
case("shape-mismatch", "model", "model.layers.0.self_attn.q_proj.weight",
     weights=st_bytes([(n, [8, 4] if n.endswith("q_proj.weight") else s) for n, s in micro_tensors()]),
     check=("model.layers.0.self_attn.q_proj.weight", [8, 8]))

# ---- config.json
case("config-unknown-type", "config", 'no arch plugin handles model_type "mamba"',
     weights=good, config=dict(MICRO, model_type="mamba"))
case("config-wrong-type", "config", "hidden_size: expected an integer, got a string",
     weights=good, config=dict(MICRO, hidden_size="8"))
case("config-truncated", "config", "invalid JSON", weights=good,
     config=json.dumps(MICRO).encode()[:40])
case("config-deep-nesting", "config", "maximum parsing depth", weights=good,
     config=b'{"model_type":"llama","x":' + b"[" * 100000 + b"]" * 100000 + b"}")
case("config-missing", "config", "config.json: No such file", weights=good, config=None)
case("config-huge-layers", "config", "num_hidden_layers: 100000 layers, at most 256", weights=good,
     config=dict(MICRO, num_hidden_layers=100000))
case("config-zero-positions", "runtime", "config.json: max_position_embeddings: must be > 0, got 0",
     weights=good, config=dict(MICRO, max_position_embeddings=0))
case("config-negative-positions", "runtime", "config.json: max_position_embeddings: must be > 0, got -4",
     weights=good, config=dict(MICRO, max_position_embeddings=-4))
case("config-negative-eps", "config", "config.json: rms_norm_eps: must be >= 0, got -1",
     weights=good, config=dict(MICRO, rms_norm_eps=-1))

# ---- bad files for `forward --inputs` (with good-micro)
ind = os.path.join(HERE, "inputs")
shutil.rmtree(ind, ignore_errors=True)
os.makedirs(ind)
def inp(name, content, expect):
    with open(os.path.join(ind, name + ".safetensors"), "wb") as f:
        f.write(content)
    with open(os.path.join(ind, name + ".expect"), "w") as f:
        f.write(expect + "\n")
good_in = st_bytes([("input_ids", [1, 3])], dtype="I32")
with open(os.path.join(ind, "good.safetensors"), "wb") as f:
    f.write(good_in)
inp("garbage", bytes(rng.randrange(256) for _ in range(512)), "header length")
inp("truncated", good_in[: len(good_in) - 4], "past the end of the data section")
inp("f64-ids", raw_header(hdr({"input_ids": {"dtype": "F64", "shape": [1, 3], "data_offsets": [0, 24]}})) + bytes(24),
    "tensor 'input_ids': dtype F64 is not supported")
inp("id-past-vocab", raw_header(hdr({"input_ids": {"dtype": "I32", "shape": [1, 3], "data_offsets": [0, 12]}}))
    + struct.pack("<3i", 1, 16, 2),
    'input tensor "input_ids": 16 at position 1 is outside [0, 16), the rows of model.embed_tokens.weight')
