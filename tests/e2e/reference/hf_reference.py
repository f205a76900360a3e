#!/usr/bin/env python3
"""An independent NumPy implementation of GPT-2 and Llama forward passes, written from the
Hugging Face model definitions (not from Tessera's code), used to check Tessera's numerics.

    hf_reference.py --family gpt2|llama --weights model.safetensors|DIR \
        (--tokens shard.bin --seq T | --layers tessera.safetensors --layers-out ref.safetensors) \
        --heads NH [--kv-heads NKV] [--eps 1e-5] [--rope-theta 10000] \
        [--sliding-window W] \
        [--top-k K --score softmax|sigmoid [--no-norm-topk] [--route-scale S] \
         [--n-group G --topk-group g]]

Llama-family attention takes q/k/v biases when the file has them (Qwen2Attention), RMSNorms
every query and key head before RoPE when the file has self_attn.q_norm / k_norm (Qwen3Attention)
and, with
--sliding-window W, masks keys more than W-1 positions back (MistralAttention's sliding
window: key j is seen by query i when i - W < j <= i).

Llama-family mixture-of-experts blocks are recognised by their tensors: Mixtral's
(block_sparse_moe.gate, block_sparse_moe.experts.N.w1/w2/w3, MixtralSparseMoeBlock: softmax
over the router logits, top-k, the k weights renormalised) or DeepSeek-V3's (mlp.gate with
e_score_correction_bias, mlp.experts.N.{gate,up,down}_proj, mlp.shared_experts.* — or
Qwen2-MoE's mlp.shared_expert.* scaled by sigmoid(mlp.shared_expert_gate(x)); DeepseekV3
MoEGate: sigmoid scores, the bias added for the choice only, groups scored by the sum of their
top-2, the best topk_group groups kept, top-k, weights normalised when norm_topk_prob and
multiplied by routed_scaling_factor). The routing options come from the command line, as
they come from config.json.

Reads the safetensors file(s) and the token shard with its own parsers, splits the shard into
consecutive windows of T+1 tokens, and prints the mean next-token cross-entropy (nats) over
every window, computed in float64. With --layers it instead runs the input_ids of a `tessera
validate --out` file and writes every layer's output (embeddings, layers.N.attention and
layers.N.mlp: the residual stream after each sublayer, final_norm, logits) under the names
Tessera uses, for `tessera validate --reference`.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32}


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin : base + end]
        if info["dtype"] == "BF16":
            u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u16.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(DTYPES[info["dtype"]]).newbyteorder("<"))
        out[name] = arr.astype(np.float64).reshape(info["shape"])
    return out


def load_weights(path):
    """A .safetensors file, or a model directory: its model.safetensors or the shards its
    model.safetensors.index.json names."""
    if not os.path.isdir(path):
        return load_safetensors(path)
    index = os.path.join(path, "model.safetensors.index.json")
    if not os.path.exists(index):
        return load_safetensors(os.path.join(path, "model.safetensors"))
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    w = {}
    for name in files:
        w.update(load_safetensors(os.path.join(path, name)))
    return w


def load_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, width, count, vocab, _ = struct.unpack("<8sIIQII", data[:32])
    assert magic == b"TSRTOKEN" and version == 1, "not a token shard"
    dt = "<u2" if width == 2 else "<u4"
    return np.frombuffer(data[32 : 32 + count * width], dtype=dt).astype(np.int64)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def attention(q, k, v, window=0):
    # q (B, NH, T, HS); k, v (B, NH, T, HS) after kv heads are repeated for GQA.
    T, hs = q.shape[2], q.shape[3]
    att = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    mask = (j <= i) & ((j > i - window) if window > 0 else True)
    att = np.where(mask, att, -np.inf)
    return softmax(att) @ v


def split_heads(x, n):
    B, T, C = x.shape
    return x.reshape(B, T, n, C // n).transpose(0, 2, 1, 3)


def merge_heads(x):
    B, n, T, hs = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, n * hs)


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def gpt2_logits(w, ids, nh, eps, rec):
    B, T = ids.shape
    h = w["wte.weight"][ids] + w["wpe.weight"][np.arange(T)][None]
    rec["embeddings"] = h
    layers = sorted({int(k.split(".")[1]) for k in w if k.startswith("h.")})
    for i in layers:
        p = f"h.{i}."
        a = layer_norm(h, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: (in, out)
        q, k, v = np.split(qkv, 3, axis=-1)
        y = merge_heads(attention(split_heads(q, nh), split_heads(k, nh), split_heads(v, nh)))
        h = h + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        rec[f"layers.{i}.attention"] = h
        m = layer_norm(h, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        h = h + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        rec[f"layers.{i}.mlp"] = h
    h = layer_norm(h, w["ln_f.weight"], w["ln_f.bias"], eps)
    rec["final_norm"] = h
    head = w.get("lm_head.weight", w["wte.weight"])
    rec["logits"] = h @ head.T
    return rec["logits"]


def rope(x, theta):
    # x (B, n, T, HS); Hugging Face rotate_half convention.
    T, hs = x.shape[2], x.shape[3]
    inv_freq = 1.0 / (theta ** (np.arange(0, hs, 2, dtype=np.float64) / hs))
    freqs = np.outer(np.arange(T, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)
    x1, x2 = x[..., : hs // 2], x[..., hs // 2 :]
    rotated = np.concatenate([-x2, x1], axis=-1)
    return x * cos + rotated * sin


def silu_mlp(x, gate, up, down):
    """down(silu(gate(x)) * up(x)), nn.Linear weights (out, in)."""
    g, u = x @ gate.T, x @ up.T
    return (g / (1.0 + np.exp(-g)) * u) @ down.T


def moe_block(w, p, x, moe):
    """The MoE MLP of block prefix p on x (B, T, C), per the HF definitions (module docstring)."""
    B, T, C = x.shape
    flat = x.reshape(B * T, C)
    mixtral = p + "block_sparse_moe.gate.weight" in w
    if mixtral:
        logits = flat @ w[p + "block_sparse_moe.gate.weight"].T
        expert = lambda e: silu_mlp(flat, *(w[f"{p}block_sparse_moe.experts.{e}.{n}.weight"]
                                            for n in ("w1", "w3", "w2")))
    else:
        logits = flat @ w[p + "mlp.gate.weight"].T
        expert = lambda e: silu_mlp(flat, *(w[f"{p}mlp.experts.{e}.{n}_proj.weight"]
                                            for n in ("gate", "up", "down")))
    E, k = logits.shape[1], moe.top_k
    scores = softmax(logits) if moe.score == "softmax" else 1.0 / (1.0 + np.exp(-logits))
    choice = scores + w.get(p + "mlp.gate.e_score_correction_bias", np.zeros(E))
    if moe.n_group > 1:
        size = E // moe.n_group
        grouped = choice.reshape(-1, moe.n_group, size)
        group_scores = np.sort(grouped, axis=-1)[..., -2:].sum(-1)  # DeepSeek-V3: top-2 sum
        keep = np.argsort(-group_scores, axis=-1, kind="stable")[:, : moe.topk_group]
        mask = np.zeros_like(group_scores, dtype=bool)
        np.put_along_axis(mask, keep, True, axis=-1)
        choice = np.where(np.repeat(mask, size, axis=-1), choice, -np.inf)
    idx = np.argsort(-choice, axis=-1, kind="stable")[:, :k]
    weights = np.take_along_axis(scores, idx, axis=-1)
    if mixtral or moe.norm_topk:
        weights = weights / (weights.sum(-1, keepdims=True) + (1e-20 if moe.score == "sigmoid" else 0))
    weights = weights * moe.route_scale
    out = np.zeros_like(flat)
    for e in range(E):
        rows = (idx == e)
        if not rows.any():
            continue
        y = expert(e)
        out += (weights * rows).sum(-1, keepdims=True) * y
    if p + "mlp.shared_experts.gate_proj.weight" in w:
        out += silu_mlp(flat, *(w[f"{p}mlp.shared_experts.{n}_proj.weight"] for n in ("gate", "up", "down")))
    if p + "mlp.shared_expert.gate_proj.weight" in w:  # Qwen2MoeSparseMoeBlock: a gated one
        shared = silu_mlp(flat, *(w[f"{p}mlp.shared_expert.{n}_proj.weight"] for n in ("gate", "up", "down")))
        gate = 1.0 / (1.0 + np.exp(-(flat @ w[p + "mlp.shared_expert_gate.weight"].T)))
        out += gate * shared
    return out.reshape(B, T, C)


def linear(x, w, name):
    """nn.Linear: x @ weight.T (+ bias when the file has one)."""
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if name + ".bias" in w else y


def llama_logits(w, ids, nh, nkv, eps, theta, moe, window, rec):
    h = w["model.embed_tokens.weight"][ids]
    rec["embeddings"] = h
    layers = sorted({int(k.split(".")[2]) for k in w if k.startswith("model.layers.")})
    for i in layers:
        p = f"model.layers.{i}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = split_heads(linear(x, w, p + "self_attn.q_proj"), nh)
        k = split_heads(linear(x, w, p + "self_attn.k_proj"), nkv)
        v = split_heads(linear(x, w, p + "self_attn.v_proj"), nkv)
        if p + "self_attn.q_norm.weight" in w:  # Qwen3Attention: RMSNorm of each head, then RoPE
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, theta), rope(k, theta)
        rep = nh // nkv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        h = h + merge_heads(attention(q, k, v, window)) @ w[p + "self_attn.o_proj.weight"].T
        rec[f"layers.{i}.attention"] = h
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        if p + "mlp.gate_proj.weight" in w:
            h = h + silu_mlp(x, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                             w[p + "mlp.down_proj.weight"])
        else:
            h = h + moe_block(w, p, x, moe)
        rec[f"layers.{i}.mlp"] = h
    h = rms_norm(h, w["model.norm.weight"], eps)
    rec["final_norm"] = h
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    rec["logits"] = h @ head.T
    return rec["logits"]


def load_input_ids(path):
    """The input_ids (I32, (B, T)) of a `tessera validate --out` file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    info = json.loads(data[8 : 8 + n])["input_ids"]
    assert info["dtype"] == "I32", "input_ids must be I32"
    begin, end = info["data_offsets"]
    raw = data[8 + n + begin : 8 + n + end]
    return np.frombuffer(raw, dtype="<i4").astype(np.int64).reshape(info["shape"])


def write_safetensors(path, tensors):
    """tensors: name -> array, written as F32 (input_ids as I32), the header padded to 8."""
    header, blobs, offset = {"__metadata__": {"producer": "hf_reference.py"}}, [], 0
    for name, arr in tensors.items():
        dtype, np_type = ("I32", "<i4") if name == "input_ids" else ("F32", "<f4")
        blob = np.ascontiguousarray(arr, dtype=np_type).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", required=True, choices=["gpt2", "llama"])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--tokens", help="token shard: print the mean loss over its windows")
    ap.add_argument("--layers", help="a `tessera validate --out` file: run on its input_ids")
    ap.add_argument("--layers-out", help="with --layers: write every layer's output here")
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--sliding-window", type=int, default=0)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--score", choices=["softmax", "sigmoid"], default="softmax")
    ap.add_argument("--no-norm-topk", dest="norm_topk", action="store_false")
    ap.add_argument("--route-scale", type=float, default=1.0)
    ap.add_argument("--n-group", type=int, default=1)
    ap.add_argument("--topk-group", type=int, default=1)
    a = ap.parse_args()
    w = load_weights(a.weights)

    def forward(ids, rec):
        if a.family == "gpt2":
            return gpt2_logits(w, ids, a.heads, a.eps, rec)
        return llama_logits(w, ids, a.heads, a.kv_heads or a.heads, a.eps, a.rope_theta, a,
                            a.sliding_window, rec)

    if a.layers:
        ids = load_input_ids(a.layers)
        rec = {"input_ids": ids}
        forward(ids, rec)
        write_safetensors(a.layers_out, rec)
        print(f"wrote {len(rec) - 1} layer outputs for {ids.shape[0]} x {ids.shape[1]} tokens")
        return 0
    tokens = load_tokens(a.tokens)
    T = a.seq
    n = (len(tokens) - 1) // T
    windows = np.stack([tokens[i * T : i * T + T + 1] for i in range(n)])
    ids, targets = windows[:, :-1], windows[:, 1:]
    logits = forward(ids, {})
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    loss = -np.take_along_axis(logp, targets[..., None], axis=-1).mean()
    print(f"loss {loss:.8f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
