#!/usr/bin/python3
"""gen_examples.py - write the shipped examples/<name>.json files.

Each example is self-contained: {"model": {flexplan.model.v1}, "spec":
{flexplan.spec.v1}} (docs/design.md, "The core design" section 2), so `flexplan compile
examples/<name>.json` needs nothing else. Run from anywhere:

    /usr/bin/python3 tools/gen_examples.py            # (re)write examples/
    /usr/bin/python3 tools/gen_examples.py --check    # fail if a file differs

Output is deterministic (a fixed compact-if-it-fits printer, one param per
line). Python standard library only. docs/examples.md explains each example.

Shapes come from each model's public configuration (facts, not code):
  llama3-8b/70b/405b  pytorch/torchtitan torchtitan/models/llama3/__init__.py
                      (llama3_configs: dim, n_layers, n_heads, n_kv_heads,
                      ffn_dim_multiplier, multiple_of; vocab 128256) and
                      model.py (compute of the FFN hidden size; param names
                      tok_embeddings, layers.N.attention.wq, ..., output).
  deepseek-v3-16b     pytorch/torchtitan torchtitan/models/deepseek_v3/
                      __init__.py, the "16B" flavor: dim 2048, 27 layers
                      (1 dense), 16 heads, q_lora_rank 0, kv_lora_rank 512,
                      qk_nope 128, qk_rope 64, v 128, dense inter 10944,
                      moe inter 1408, 64 routed + 2 shared experts, top-6,
                      vocab 102400.
  mixtral-8x7b        huggingface/transformers src/transformers/models/
                      mixtral/configuration_mixtral.py (defaults = 8x7B:
                      hidden 4096, intermediate 14336, 32 layers, 32/8
                      heads, 8 local experts, top-2, vocab 32000, untied).
  paligemma-3b-224    huggingface/transformers models/paligemma (config of
                      google/paligemma-3b-pt-224: SigLIP So400m/14 vision
                      tower, 27 layers, hidden 1152, intermediate 4304, 16
                      heads, patch 14, 224 px -> 256 patches, no head;
                      linear projector 1152 -> 2048; Gemma-2B text model, 18
                      layers, hidden 2048, intermediate 16384, 8 heads, 1 KV
                      head, head_dim 256, vocab 257216, tied embeddings).
                      Cross-check: KerasHub's pali_gemma_3b_*_224 presets
                      list 2,923,335,408 params with vocab 257152; the HF
                      checkpoint pads the vocab to 257216 (+64 rows).

Cost annotations (see docs/examples.md for the reasoning):
  T = tokens per micro-batch (b sequences of s tokens).
  flops_fwd(block) = 2 * T * (matmul params a token meets: for MoE the
                     router, the top-k routed experts and the shared experts)
                     + attention scores and values 2 * b * s^2 * H * (d_qk +
                     d_v), i.e. 4 * b * s^2 * H * d_head for d_qk = d_v: the
                     non-causal upper bound (a causal kernel does ~half).
  flops_fwd(embedding) = T * d (nominal: a gather), (RMS/Layer)Norm 4 * T * d,
  flops_fwd(lm head)   = 2 * T * vocab * d.
  flops_bwd        = only where 2 x flops_fwd is wrong: 3 x with full AC
                     (the forward is recomputed), 0 for the frozen vision
                     tower (no gradient flows into it).
  activation_bytes = bytes the module's forward saves for its backward, bf16
                     (2 bytes/element), see act_* below; with full
                     activation checkpointing (full AC) only the block input
                     T * d is kept.
"""
import json
import os
import sys

BF16 = 2  # bytes per activation element (bf16 activations)
GiB = 1 << 30

# ---------------------------------------------------------------------------
# compact-if-it-fits JSON printer (deterministic)


def _dump(v, indent, width):
  flat = json.dumps(v, separators=(", ", ": "))
  if not isinstance(v, (dict, list)) or len(flat) + indent <= width:
    return flat
  pad = " " * (indent + 1)
  if isinstance(v, list):
    items = [pad + _dump(x, indent + 1, width) for x in v]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
  items = []
  for k, x in v.items():
    key = json.dumps(k) + ": "
    items.append(pad + key + _dump(x, indent + 1, width))
  return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


def dumps(v):
  return _dump(v, 0, 100) + "\n"


# ---------------------------------------------------------------------------
# model building helpers


class Model:
  def __init__(self, name):
    self.name = name
    self.modules = []
    self.order = None

  def module(self, name, params, flops=None, act=None, flops_bwd=None):
    m = {"name": name}
    if flops is not None:
      m["flops_fwd"] = float(round(flops))
    if flops_bwd is not None:
      m["flops_bwd"] = float(round(flops_bwd))
    if act is not None:
      m["activation_bytes"] = int(act)
    m["params"] = params
    self.modules.append(m)
    return m

  def numel(self, pred=lambda p: True):
    n = 0
    for m in self.modules:
      for p in m["params"]:
        if pred(p):
          k = 1
          for d in p["shape"]:
            k *= d
          n += k
    return n

  def nparams(self):
    return sum(len(m["params"]) for m in self.modules)

  def json(self):
    # v2 only where a v2 member is used ("uses": tied weights)
    v2 = any("uses" in m or "activation_bytes_checkpointed" in m or any("tp" in p for p in m["params"])
             for m in self.modules)
    out = {"format": "flexplan.model.v2" if v2 else "flexplan.model.v1", "name": self.name, "modules": self.modules}
    if self.order is not None:
      out["forward_order"] = self.order
    return out


def P(name, *shape, frozen=False, dtype=None):
  """A param. Frozen params keep bf16 weights (no optimizer needs fp32)."""
  p = {"name": name, "shape": list(shape)}
  if dtype is None and frozen:
    dtype = "bf16"
  if dtype is not None:
    p["dtype"] = dtype
  if frozen:
    p["requires_grad"] = False
  return p


def lin(prefix, out_f, in_f, bias=False, frozen=False):
  """nn.Linear: weight [out, in] (+ bias [out])."""
  ps = [P(prefix + ".weight", out_f, in_f, frozen=frozen)]
  if bias:
    ps.append(P(prefix + ".bias", out_f, frozen=frozen))
  return ps


def spec(world, strategy, rpn=8, **kw):
  s = {"format": "flexplan.spec.v1",
       "mesh": {"world_size": world, "ranks_per_node": min(rpn, world)},
       "strategy": strategy}
  s.update(kw)
  return s


def attn_flops(b, s, heads, d_qk, d_v):
  """Scores (Q K^T) and values (P V), non-causal: the upper bound."""
  return 2 * b * s * s * heads * (d_qk + d_v)


# ---------------------------------------------------------------------------
# Llama 3 (torchtitan names and shapes)

LLAMA3 = {
    #          dim,  layers, heads, kv, ffn hidden (compute_ffn_hidden_dim)
    "8b": (4096, 32, 32, 8, 14336),
    "70b": (8192, 80, 64, 8, 28672),
    "405b": (16384, 126, 128, 8, 53248),
}
LLAMA3_VOCAB = 128256
# Published totals (untied embeddings): used as a check.
LLAMA3_TOTAL = {"8b": 8030261248, "70b": 70553706496, "405b": 405853388800}


def llama_ffn_hidden(dim, multiplier, multiple_of):
  """torchtitan compute_ffn_hidden_dim, hidden_dim = 4 * dim."""
  h = int(2 * (4 * dim) / 3)
  h = int(multiplier * h)
  return multiple_of * ((h + multiple_of - 1) // multiple_of)


assert llama_ffn_hidden(4096, 1.3, 1024) == 14336
assert llama_ffn_hidden(8192, 1.3, 4096) == 28672
assert llama_ffn_hidden(16384, 1.2, 4096) == 53248


def act_llama_block(T, d, dq, kv, f):
  """No AC. Saved per token (elements): both norm inputs (2d), both norm
  outputs = inputs of wq/wk/wv and of w1/w3 (2d), q, k, v after RoPE for
  the attention kernel (dq + 2kv), the attention output = wo input (d),
  w1 and w3 outputs and their SwiGLU product = w2 input (3f)."""
  return BF16 * T * (5 * d + dq + 2 * kv + 3 * f)


def act_lm_head(T, d, vocab):
  """The head's input (bf16) + bf16 logits + the fp32 logits the loss
  keeps."""
  return BF16 * T * d + (2 + 4) * T * vocab


# torchtitan's tensor-parallel plan for Llama 3 (parallelize_llama): q/k/v and
# w1/w3 ColwiseParallel (weight [out, in] split along out: Shard(0)), wo and w2
# RowwiseParallel (split along in: Shard(1)), the embedding RowwiseParallel
# (its [vocab, dim] weight split along vocab: Shard(0)), the output projection
# ColwiseParallel (Shard(0)); the norms stay whole on every tp rank
LLAMA3_TP = {"attention.wq": 0, "attention.wk": 0, "attention.wv": 0, "attention.wo": 1,
             "feed_forward.w1": 0, "feed_forward.w3": 0, "feed_forward.w2": 1,
             "tok_embeddings": 0, "output": 0}


def tp_mark(params):
  """the params of torchtitan's Llama TP plan, marked with their tp dim"""
  for p in params:
    base = p["name"].rsplit(".", 1)[0]
    key = base.split(".", 2)[2] if base.startswith("layers.") else base
    if key in LLAMA3_TP:
      p["tp"] = {"kind": "shard", "dim": LLAMA3_TP[key]}
  return params


def llama3(size, world, strategy, extra_spec, b, s, full_ac, tp=1, name=None):
  d, L, H, KV, F = LLAMA3[size]
  hd = d // H
  kvd = KV * hd
  T = b * s
  m = Model(name or "llama3-" + size)
  m.module("tok_embeddings", [P("tok_embeddings.weight", LLAMA3_VOCAB, d)],
           flops=T * d, act=8 * T)  # saves the int64 token ids
  blk_mm = d * d + 2 * kvd * d + d * d + 3 * F * d
  blk_flops = 2 * T * blk_mm + attn_flops(b, s, H, hd, hd) + 2 * 4 * T * d
  blk_act = BF16 * T * d if full_ac else act_llama_block(T, d, d, kvd, F)
  blk_bwd = 3 * blk_flops if full_ac else None  # 2x + the recomputed forward
  for i in range(L):
    p = "layers.%d." % i
    m.module("layers.%d" % i,
             lin(p + "attention.wq", d, d) + lin(p + "attention.wk", kvd, d)
             + lin(p + "attention.wv", kvd, d) + lin(p + "attention.wo", d, d)
             + lin(p + "feed_forward.w1", F, d) + lin(p + "feed_forward.w2", d, F)
             + lin(p + "feed_forward.w3", F, d)
             + [P(p + "attention_norm.weight", d), P(p + "ffn_norm.weight", d)],
             flops=blk_flops, act=blk_act, flops_bwd=blk_bwd)
  m.module("norm", [P("norm.weight", d)], flops=4 * T * d, act=BF16 * T * d)
  m.module("output", lin("output", LLAMA3_VOCAB, d),
           flops=2 * T * LLAMA3_VOCAB * d, act=act_lm_head(T, d, LLAMA3_VOCAB))
  assert m.numel() == LLAMA3_TOTAL[size], (size, m.numel())
  if tp > 1:
    for mod in m.modules:
      tp_mark(mod["params"])
  sp = spec(world, strategy, **extra_spec)
  if tp > 1:
    sp["mesh"]["tp"] = tp
  sp["buckets"] = [
      {"name": "embed", "params": ["tok_embeddings.*"]},
      {"name": "block", "params": ["layers.*"], "split": "per_module"},
      {"name": "head", "params": ["norm.*", "output.*"]},
  ]
  sp["prefetch"] = sp.pop("prefetch", {"forward": 1, "backward": 1})
  for k in ("grad_accumulation", "memory_budget_bytes", "hardware"):
    if k in extra_spec:
      sp[k] = sp.pop(k)  # keep a stable, readable key order
  return m, sp


# ---------------------------------------------------------------------------
# DeepSeek-V3 16B (torchtitan "16B" flavor; MLA with q_lora_rank 0)

DSV3_16B = dict(dim=2048, layers=27, dense_layers=1, heads=16, kv_lora=512,
                qk_nope=128, qk_rope=64, v=128, dense_inter=10944,
                moe_inter=1408, experts=64, shared=2, top_k=6, vocab=102400)


# DeepSeek-V3 671B (deepseek-ai/DeepSeek-V3 config.json): for the compile
# benchmark only (bench/), ~45,000 params with every expert's matrices apart.
DSV3_671B = dict(dim=7168, layers=61, dense_layers=3, heads=128, kv_lora=512, q_lora=1536,
                 qk_nope=128, qk_rope=64, v=128, dense_inter=18432,
                 moe_inter=2048, experts=256, shared=1, top_k=8, vocab=129280)


def deepseek_v3_16b(b, s):
  return deepseek_v3(DSV3_16B, "deepseek-v3-16b", b, s)


def deepseek_v3(c, name, b, s, world=16):
  d, H, E, K = c["dim"], c["heads"], c["experts"], c["top_k"]
  qk = c["qk_nope"] + c["qk_rope"]
  fm, fs = c["moe_inter"], c["moe_inter"] * c["shared"]
  T = b * s
  m = Model(name)
  m.module("tok_embeddings", [P("tok_embeddings.weight", c["vocab"], d)],
           flops=T * d, act=8 * T)
  attn_mm = H * qk * d + (c["kv_lora"] + c["qk_rope"]) * d \
      + H * (c["qk_nope"] + c["v"]) * c["kv_lora"] + d * H * c["v"]
  attn_fl = 2 * T * attn_mm + attn_flops(b, s, H, qk, c["v"]) + 3 * 4 * T * d
  # saved per token: 2 norm inputs, attention_norm output (wq / wkv_a input),
  # wkv_a output, kv_norm output (wkv_b input), q, k, v for the attention
  # kernel, attention output (wo input), ffn_norm output.
  attn_act = 2 * d + d + (c["kv_lora"] + c["qk_rope"]) + c["kv_lora"] \
      + H * (qk + qk + c["v"]) + H * c["v"] + d
  for i in range(c["layers"]):
    p = "layers.%d." % i
    if c.get("q_lora"):
      wq = (lin(p + "attention.wq_a", c["q_lora"], d) + [P(p + "attention.q_norm.weight", c["q_lora"])]
            + lin(p + "attention.wq_b", H * qk, c["q_lora"]))
    else:
      wq = lin(p + "attention.wq", H * qk, d)
    ps = (wq
          + lin(p + "attention.wkv_a", c["kv_lora"] + c["qk_rope"], d)
          + [P(p + "attention.kv_norm.weight", c["kv_lora"])]
          + lin(p + "attention.wkv_b", H * (c["qk_nope"] + c["v"]), c["kv_lora"])
          + lin(p + "attention.wo", d, H * c["v"])
          + [P(p + "attention_norm.weight", d), P(p + "ffn_norm.weight", d)])
    if i < c["dense_layers"]:
      F = c["dense_inter"]
      ps += (lin(p + "feed_forward.w1", F, d) + lin(p + "feed_forward.w2", d, F)
             + lin(p + "feed_forward.w3", F, d))
      fl = attn_fl + 2 * T * 3 * F * d
      act = BF16 * T * (attn_act + 3 * F)
    else:
      ps += lin(p + "moe.router.gate", E, d)
      for e in range(E):
        q = p + "moe.experts.%d." % e
        ps += lin(q + "w1", fm, d) + lin(q + "w2", d, fm) + lin(q + "w3", fm, d)
      ps += (lin(p + "moe.shared_experts.w1", fs, d)
             + lin(p + "moe.shared_experts.w2", d, fs)
             + lin(p + "moe.shared_experts.w3", fs, d))
      fl = attn_fl + 2 * T * (E * d + K * 3 * fm * d + 3 * fs * d)
      # + router scores (E), per routed copy the permuted input and the
      # SwiGLU tensors (K * (d + 3 fm)), shared expert SwiGLU tensors (3 fs)
      act = BF16 * T * (attn_act + E + K * (d + 3 * fm) + 3 * fs)
    m.module("layers.%d" % i, ps, flops=fl, act=act)
  m.module("norm", [P("norm.weight", d)], flops=4 * T * d, act=BF16 * T * d)
  m.module("output", lin("output", c["vocab"], d),
           flops=2 * T * c["vocab"] * d, act=act_lm_head(T, d, c["vocab"]))
  sp = spec(world, "full_shard")
  sp["buckets"] = [
      {"name": "embed", "params": ["tok_embeddings.*"]},
      {"name": "experts", "params": ["layers.*.moe.experts.*"], "split": "per_module"},
      {"name": "block", "params": ["layers.*"], "split": "per_module"},
      {"name": "head", "params": ["norm.*", "output.*"]},
  ]
  sp["prefetch"] = {"forward": 1, "backward": 1}
  sp["memory_budget_bytes"] = 80 * GiB
  sp["hardware"] = {"preset": "h100-sxm"}
  return m, sp


# ---------------------------------------------------------------------------
# Mixtral 8x7B (Hugging Face names and shapes)

MIXTRAL = dict(dim=4096, layers=32, heads=32, kv_heads=8, inter=14336,
               experts=8, top_k=2, vocab=32000)
MIXTRAL_TOTAL = 46702792704


def mixtral_8x7b(b, s):
  c = MIXTRAL
  d, H, E, K, F = c["dim"], c["heads"], c["experts"], c["top_k"], c["inter"]
  hd = d // H
  kvd = c["kv_heads"] * hd
  T = b * s
  m = Model("mixtral-8x7b")
  m.module("model.embed_tokens", [P("model.embed_tokens.weight", c["vocab"], d)],
           flops=T * d, act=8 * T)
  mm = 2 * d * d + 2 * kvd * d + E * d + K * 3 * F * d
  fl = 2 * T * mm + attn_flops(b, s, H, hd, hd) + 2 * 4 * T * d
  act = BF16 * T * d  # full activation checkpointing: the block input only
  for i in range(c["layers"]):
    p = "model.layers.%d." % i
    ps = (lin(p + "self_attn.q_proj", d, d) + lin(p + "self_attn.k_proj", kvd, d)
          + lin(p + "self_attn.v_proj", kvd, d) + lin(p + "self_attn.o_proj", d, d)
          + lin(p + "block_sparse_moe.gate", E, d))
    for e in range(E):
      q = p + "block_sparse_moe.experts.%d." % e
      ps += lin(q + "w1", F, d) + lin(q + "w2", d, F) + lin(q + "w3", F, d)
    ps += [P(p + "input_layernorm.weight", d), P(p + "post_attention_layernorm.weight", d)]
    m.module("model.layers.%d" % i, ps, flops=fl, act=act, flops_bwd=3 * fl)
  m.module("model.norm", [P("model.norm.weight", d)], flops=4 * T * d, act=BF16 * T * d)
  m.module("lm_head", lin("lm_head", c["vocab"], d),
           flops=2 * T * c["vocab"] * d, act=act_lm_head(T, d, c["vocab"]))
  assert m.numel() == MIXTRAL_TOTAL, m.numel()
  sp = spec(32, "shard_grad_op")
  sp["buckets"] = [
      {"name": "embed", "params": ["model.embed_tokens.*"]},
      {"name": "block", "params": ["model.layers.*"], "split": "per_module"},
      {"name": "head", "params": ["model.norm.*", "lm_head.*"]},
  ]
  sp["prefetch"] = {"forward": 1, "backward": 1}
  sp["memory_budget_bytes"] = 128 * GiB
  sp["hardware"] = {"preset": "h200"}
  return m, sp


# ---------------------------------------------------------------------------
# PaliGemma 3B, 224 px (Hugging Face names: vision_tower.*,
# multi_modal_projector.*, language_model.*)

SIGLIP = dict(dim=1152, layers=27, heads=16, inter=4304, patch=14, image=224, chans=3)
GEMMA2B = dict(dim=2048, layers=18, heads=8, kv_heads=1, head_dim=256,
               inter=16384, vocab=257216)
PALIGEMMA_TOTAL = 2923335408 + 64 * 2048  # KerasHub preset (vocab 257152) + 64 rows


def paligemma_3b(b, text_len):
  v, g = SIGLIP, GEMMA2B
  dv, dt = v["dim"], g["dim"]
  npatch = (v["image"] // v["patch"]) ** 2  # 256
  Tv = b * npatch
  s = npatch + text_len                     # image tokens are the prefix
  T = b * s
  m = Model("paligemma-3b-224")
  vp = "vision_tower.vision_model."
  # Frozen tower fed by pixels: it needs no backward at all (flops_bwd 0)
  # and saves nothing for one (no activation_bytes).
  m.module(vp + "embeddings",
           [P(vp + "embeddings.patch_embedding.weight", dv, v["chans"], v["patch"], v["patch"],
              frozen=True),
            P(vp + "embeddings.patch_embedding.bias", dv, frozen=True),
            P(vp + "embeddings.position_embedding.weight", npatch, dv, frozen=True)],
           flops=2 * Tv * dv * v["chans"] * v["patch"] ** 2, flops_bwd=0)
  vhd = dv // v["heads"]
  vfl = 2 * Tv * (4 * dv * dv + 2 * dv * v["inter"]) \
      + attn_flops(b, npatch, v["heads"], vhd, vhd) + 2 * 4 * Tv * dv
  for i in range(v["layers"]):
    p = vp + "encoder.layers.%d." % i
    ps = []
    for n in ("k_proj", "v_proj", "q_proj", "out_proj"):
      ps += lin(p + "self_attn." + n, dv, dv, bias=True, frozen=True)
    ps += [P(p + "layer_norm1.weight", dv, frozen=True), P(p + "layer_norm1.bias", dv, frozen=True)]
    ps += lin(p + "mlp.fc1", v["inter"], dv, bias=True, frozen=True)
    ps += lin(p + "mlp.fc2", dv, v["inter"], bias=True, frozen=True)
    ps += [P(p + "layer_norm2.weight", dv, frozen=True), P(p + "layer_norm2.bias", dv, frozen=True)]
    m.module(vp + "encoder.layers.%d" % i, ps, flops=vfl, flops_bwd=0)
  m.module(vp + "post_layernorm",
           [P(vp + "post_layernorm.weight", dv, frozen=True),
            P(vp + "post_layernorm.bias", dv, frozen=True)], flops=4 * Tv * dv, flops_bwd=0)
  # Trainable projector: keeps its input for the weight gradient.
  m.module("multi_modal_projector", lin("multi_modal_projector.linear", dt, dv, bias=True),
           flops=2 * Tv * dv * dt, act=BF16 * Tv * dv)
  lp = "language_model.model."
  H, KV, hd, F = g["heads"], g["kv_heads"], g["head_dim"], g["inter"]
  # The embedding is tied to the LM head: the module runs twice in
  # forward_order (lookup, then head matmul). flops/activations are per
  # occurrence, so the head's cost is split evenly over the two.
  m.module(lp + "embed_tokens", [P(lp + "embed_tokens.weight", g["vocab"], dt)],
           flops=(T * dt + 2 * T * g["vocab"] * dt) / 2,
           act=(8 * T + act_lm_head(T, dt, g["vocab"])) // 2)
  mm = H * hd * dt + 2 * KV * hd * dt + dt * H * hd + 3 * F * dt
  fl = 2 * T * mm + attn_flops(b, s, H, hd, hd) + 2 * 4 * T * dt
  act = act_llama_block(T, dt, H * hd, KV * hd, F)  # GeGLU: same saved tensors
  for i in range(g["layers"]):
    p = lp + "layers.%d." % i
    ps = (lin(p + "self_attn.q_proj", H * hd, dt) + lin(p + "self_attn.k_proj", KV * hd, dt)
          + lin(p + "self_attn.v_proj", KV * hd, dt) + lin(p + "self_attn.o_proj", dt, H * hd)
          + lin(p + "mlp.gate_proj", F, dt) + lin(p + "mlp.up_proj", F, dt)
          + lin(p + "mlp.down_proj", dt, F)
          + [P(p + "input_layernorm.weight", dt), P(p + "post_attention_layernorm.weight", dt)])
    m.module(lp + "layers.%d" % i, ps, flops=fl, act=act)
  m.module(lp + "norm", [P(lp + "norm.weight", dt)], flops=4 * T * dt, act=BF16 * T * dt)
  names = [x["name"] for x in m.modules]
  m.order = names + [lp + "embed_tokens"]
  assert m.numel() == PALIGEMMA_TOTAL, m.numel()
  sp = spec(8, "full_shard")
  sp["buckets"] = [
      {"name": "projector", "params": ["multi_modal_projector.*"]},
      {"name": "embed", "params": ["language_model.model.embed_tokens.*"]},
      {"name": "block", "params": ["language_model.model.layers.*"], "split": "per_module"},
      {"name": "head", "params": ["language_model.model.norm.*"]},
  ]
  sp["no_shard"] = ["vision_tower.*"]
  sp["prefetch"] = {"forward": 1, "backward": 1}
  sp["memory_budget_bytes"] = 80 * GiB
  sp["hardware"] = {"preset": "h100-sxm"}
  return m, sp


# ---------------------------------------------------------------------------
# tiny MLP for the executor tests: fc0..fc3, 16 -> 32 -> 32 -> 32 -> 8

TINY_DIMS = [16, 32, 32, 32, 8]
FP32_MP = {"param_dtype": "fp32", "reduce_dtype": "fp32", "main_grad_dtype": "fp32"}


def tiny_mlp(name):
  m = Model(name)
  for i in range(len(TINY_DIMS) - 1):
    m.module("fc%d" % i, lin("fc%d" % i, TINY_DIMS[i + 1], TINY_DIMS[i], bias=True))
  return m


def tiny_variants():
  out = {}
  # one bucket per module (no "buckets": the default), all fp32
  m = tiny_mlp("tiny-mlp")
  out["tiny-mlp"] = (m, spec(4, "full_shard", defaults={"mixed_precision": FP32_MP}))
  # every placement in one step; rank 2 owns nothing of fc0 (units 0)
  m = tiny_mlp("tiny-mlp-ragged")
  sp = spec(4, "full_shard", defaults={"mixed_precision": FP32_MP})
  sp["buckets"] = [
      {"name": "fc0", "params": ["fc0.*"],
       "placement": {"kind": "ragged_shard", "units": [1, 2, 0, 1], "align_elems": 4}},
      {"name": "fc1", "params": ["fc1.*"], "placement": {"kind": "owned", "rank": "auto"}},
      {"name": "fc2", "params": ["fc2.*"], "placement": {"kind": "replicate"}},
      {"name": "fc3", "params": ["fc3.*"], "placement": {"kind": "shard", "dim": 0}},
  ]
  out["tiny-mlp-ragged"] = (m, sp)
  # hybrid_shard: shard over pairs, replicate across; two micro-batches
  m = tiny_mlp("tiny-mlp-hybrid")
  sp = spec(4, "hybrid_shard", rpn=2, hybrid_shard={"intra_node_size": 2},
            defaults={"mixed_precision": FP32_MP})
  sp["grad_accumulation"] = 2
  out["tiny-mlp-hybrid"] = (m, sp)
  # ZeRO-2: params replicated, grads and optimizer state sharded; fc3 is
  # frozen and fc0 kept replicated by no_shard (all-reduced grads)
  m = tiny_mlp("tiny-mlp-zero2")
  for p in m.modules[3]["params"]:
    p["requires_grad"] = False
  sp = spec(4, "shard_grad_op", defaults={"mixed_precision": FP32_MP})
  sp["no_shard"] = ["fc0.*"]
  out["tiny-mlp-zero2"] = (m, sp)
  # DDP
  m = tiny_mlp("tiny-mlp-ddp")
  out["tiny-mlp-ddp"] = (m, spec(4, "no_shard", defaults={"mixed_precision": FP32_MP}))
  # a tied weight (model.json v2 "uses"): fc3 has only a bias and reads
  # fc0.weight [32, 16] transposed (32 -> 16), as train_mlp's tied layer; fc1
  # and fc2 are recomputed in backward (the spec's "recompute")
  m = Model("tiny-mlp-tied")
  for i in range(3):
    m.module("fc%d" % i, lin("fc%d" % i, TINY_DIMS[i + 1], TINY_DIMS[i], bias=True))
  m.module("fc3", [P("fc3.bias", TINY_DIMS[0])])["uses"] = ["fc0.weight"]
  sp = spec(4, "full_shard", defaults={"mixed_precision": FP32_MP})
  sp["recompute"] = ["fc1", "fc2"]
  out["tiny-mlp-tied"] = (m, sp)
  return out


# ---------------------------------------------------------------------------

LLAMA_B, LLAMA_S = 1, 8192  # micro-batch of the Llama, DeepSeek and Mixtral examples
VLM_B, VLM_TEXT = 8, 256    # PaliGemma: 8 images x (256 image + 256 text tokens)


def examples():
  ex = {}
  ex["llama3-8b"] = llama3("8b", 8, "full_shard", {
      "defaults": {"placement": {"kind": "shard", "dim": 0},
                   "mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32",
                                       "main_grad_dtype": "fp32"},
                   "reshard_after_forward": True},
      "memory_budget_bytes": 80 * GiB, "hardware": {"preset": "h100-sxm"}},
      LLAMA_B, LLAMA_S, full_ac=False)
  ex["llama3-70b"] = llama3("70b", 64, "hybrid_shard", {
      "hybrid_shard": {"intra_node_size": 8}, "grad_accumulation": 2,
      "hardware": {"preset": "h100-sxm"}}, LLAMA_B, LLAMA_S, full_ac=True)
  ex["llama3-405b"] = llama3("405b", 16384, "hybrid_shard", {
      "hybrid_shard": {"intra_node_size": 8},
      "hardware": {"preset": "h100-sxm"}}, LLAMA_B, LLAMA_S, full_ac=True)
  # FSDP x TP as torchtitan trains them: 70B as FSDP 32 x TP 8, 405B with
  # tp 8 inside each node, sharded over 32 dp ranks and replicated 64 times (HSDP)
  ex["llama3-70b-tp8"] = llama3("70b", 256, "full_shard", {
      "prefetch": {"forward": "auto", "backward": "auto"}, "grad_accumulation": 2,
      "memory_budget_bytes": 80 * GiB, "hardware": {"preset": "h100-sxm"}}, LLAMA_B, LLAMA_S, full_ac=True, tp=8,
      name="llama3-70b-tp8")
  ex["llama3-405b-tp8"] = llama3("405b", 16384, "hybrid_shard", {
      "hybrid_shard": {"intra_node_size": 32},
      "hardware": {"preset": "h100-sxm"}}, LLAMA_B, LLAMA_S, full_ac=True, tp=8, name="llama3-405b-tp8")
  ex["deepseek-v3-16b"] = deepseek_v3_16b(LLAMA_B, LLAMA_S)
  ex["mixtral-8x7b"] = mixtral_8x7b(LLAMA_B, LLAMA_S)
  ex["paligemma-3b-224"] = paligemma_3b(VLM_B, VLM_TEXT)
  ex.update(tiny_variants())
  return ex


def bench_models(outdir):
  """the compile benchmark's models: DeepSeek-V3 671B at 2,048 ranks, and the
  same shape cut to fewer layers (time per param at three sizes)"""
  os.makedirs(outdir, exist_ok=True)
  for layers in (16, 31, 61):
    c = dict(DSV3_671B, layers=layers)
    name = "deepseek-v3-671b" if layers == 61 else "deepseek-v3-671b-%dl" % layers
    m, sp = deepseek_v3(c, name, LLAMA_B, LLAMA_S, world=2048)
    del sp["memory_budget_bytes"]
    with open(os.path.join(outdir, name + ".json"), "w") as f:
      f.write(dumps({"model": m.json(), "spec": sp}))
    print("%s: %d params, %.1f B" % (name, m.nparams(), m.numel() / 1e9))
  return 0


def main(argv):
  if len(argv) == 3 and argv[1] == "--bench":
    return bench_models(argv[2])
  check = "--check" in argv[1:]
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  outdir = os.path.join(root, "examples")
  os.makedirs(outdir, exist_ok=True)
  bad = 0
  print("%-18s %7s %6s %16s %10s %12s %8s" %
        ("example", "world", "params", "numel", "billions", "trainable", "KiB"))
  for name, (m, sp) in sorted(examples().items()):
    text = dumps({"model": m.json(), "spec": sp})
    path = os.path.join(outdir, name + ".json")
    if check:
      try:
        with open(path) as f:
          same = f.read() == text
      except OSError:
        same = False
      if not same:
        print("differs: %s" % path, file=sys.stderr)
        bad += 1
    else:
      tmp = path + ".tmp"
      with open(tmp, "w") as f:
        f.write(text)
      os.replace(tmp, path)
    n = m.numel()
    tr = m.numel(lambda p: p.get("requires_grad", True))
    print("%-18s %7d %6d %16d %10.3f %12d %8d" %
          (name, sp["mesh"]["world_size"], m.nparams(), n, n / 1e9, tr, len(text) // 1024))
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
