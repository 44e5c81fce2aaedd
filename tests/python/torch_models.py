"""Tiny models, data and single-process references shared by the PyTorch
tests, the FSDP2 runner and the benchmark.

- ``tiny_llama()``: a 2-layer Llama from transformers' LlamaConfig with tied
  embeddings (tie_word_embeddings=True): one Parameter used by the embedding
  and the LM head.
- ``mlp()``: a plain MLP (Linear/GELU), with one unit that can be frozen.
- ``batches()``: deterministic data per global micro-batch (token ids, or
  (x, y) pairs), so every rank and every runner sees the same global batch.
- ``reference_train()``: single-process training on the whole global batch,
  the reference every sharded run is compared with.
"""
import torch
from torch import nn

VOCAB, HIDDEN, LAYERS, SEQ = 64, 32, 2, 8
LM_KINDS = ("llama", "mixtral", "qwen2_moe")  # token ids and cross entropy; the others (x, y) and mse
MLP_DIMS = [12, 24, 24, 20, 6]


def tiny_llama(seed=0, tie=None):
    import os
    if tie is None:
        tie = os.environ.get("FP_TEST_UNTIED") != "1"
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=48, num_hidden_layers=LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=tie, attn_implementation="eager")
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():  # visible norms: random, not ones
        for n, p in m.named_parameters():
            if "norm" in n:
                p.uniform_(0.8, 1.2)
    return m


LLAMA_UNITS = ["model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm", "lm_head"]
# FSDP2: fully_shard on each layer, the root holds the tied embedding, the norm and the head (as torchtitan)
LLAMA_FSDP2_UNITS = ["model.layers.0", "model.layers.1"]


class MLP(nn.Module):
    def __init__(self, dims=MLP_DIMS):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.checkpoint = False  # checkpoint the hidden layers' calls: their module hooks run again in backward

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        for i, l in enumerate(self.layers):
            if self.checkpoint and 0 < i < len(self.layers) - 1:
                x = checkpoint(l, x, use_reentrant=False)
            else:
                x = l(x)
            if i + 1 < len(self.layers):
                x = torch.nn.functional.gelu(x)
        return x


def mlp(seed=0):
    torch.manual_seed(seed)
    return MLP()


MLP_UNITS = [f"layers.{i}" for i in range(len(MLP_DIMS) - 1)]


def batch(kind, g, mb_size=2):
    """global micro-batch g (deterministic)"""
    gen = torch.Generator().manual_seed(1000 + g)
    if kind in LM_KINDS:
        ids = torch.randint(0, VOCAB, (mb_size, SEQ + 1), generator=gen)
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    x = torch.randn(mb_size, MLP_DIMS[0], generator=gen)
    y = torch.randn(mb_size, MLP_DIMS[-1], generator=gen)
    return x, y


def loss_fn(kind, model, inp, tgt):
    if kind in LM_KINDS:
        logits = model(input_ids=inp).logits
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1))
    out = model(inp)
    return torch.nn.functional.mse_loss(out.float(), tgt)


def model_json(module, units, name="m", frozen=()):
    """A model.json for `module` with the given units: each param goes to the
    longest unit prefix of its (first) name; a unit whose submodule reads a
    param declared by another unit (a tied weight) lists it in "uses"
    (format v2). Forward order = units' order. A stand-in for
    flexplan.torch.describe where explicit units and no tracing are wanted."""
    def unit_of(n):
        return max((u for u in units if n == u or n.startswith(u + ".")), key=len, default=None)
    canon = {}
    for n, p in module.named_parameters():
        canon[id(p)] = n
    mods = {u: [] for u in units}
    uses = {u: [] for u in units}
    for n, p in module.named_parameters():
        best = unit_of(n)
        if best is None:
            raise ValueError(f"param {n} is in no unit")
        e = {"name": n, "shape": list(p.shape)}
        if best in frozen or not p.requires_grad:
            e["requires_grad"] = False
        mods[best].append(e)
    for n, p in module.named_parameters(remove_duplicate=False):
        u, c = unit_of(n), canon[id(p)]
        if u is not None and unit_of(c) != u and c not in uses[u]:
            uses[u].append(c)
    tied = any(uses.values())
    out = []
    for u in units:
        m = {"name": u, "params": mods[u]}
        if uses[u]:
            m["uses"] = uses[u]
        out.append(m)
    return {"format": "flexplan.model.v2" if tied else "flexplan.model.v1", "name": name, "modules": out}


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def sgd_momentum(params):
    """SGD with momentum and dampening: its first step keeps the grad itself
    as the momentum buffer, later ones damp it (the plan's sgd state)."""
    return torch.optim.SGD(params, lr=5e-2, momentum=0.9, dampening=0.1, weight_decay=0.01)


def reference_train(kind, model, steps, world, ga, mb_size=2, frozen=(), param_dtype=None, clip=None,
                    checkpoint=False, order="forward", make_opt=None, losses=None, after_step=None):
    """Single-process reference: each step, the global batch of world*ga
    micro-batches; loss = mean over micro-batches of each micro-batch's mean
    loss (what the plan's 1/(world*ga) scaling of summed grads computes).
    param_dtype bf16: compute weights cast from fp32 main weights, grads
    accumulated in fp32 (the plan's casts). Returns final params (fp32).
    losses: a list that gets each step's loss (the mean of its micro-batches'
    losses). after_step(step, model, main): called after each optimizer
    step with the model's params set from the updated main weights (main:
    name -> the fp32 main tensor, which it may change in place)."""
    for u in frozen:
        for p in model.get_submodule(u).parameters():
            p.requires_grad_(False)
    main = {n: p.detach().clone().float() for n, p in model.named_parameters()}
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    mp = [nn.Parameter(main[n]) for n in trainable]
    opt = (make_opt or adamw)(mp)
    if param_dtype is not None:  # params only, as FSDP2's MixedPrecisionPolicy (buffers stay)
        for p in model.parameters():
            p.data = p.data.to(param_dtype)
    for step in range(steps):
        acc = {n: torch.zeros_like(main[n]) for n in trainable}
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(main[n].to(p.dtype))
        step_loss = 0.0
        for r in (reversed(range(world)) if order == "reversed" else range(world)):
            for k in range(ga):
                g = step * world * ga + r * ga + k
                inp, tgt = batch(kind, g, mb_size)
                if param_dtype is not None and inp.is_floating_point():
                    inp = inp.to(param_dtype)  # as FSDP2's cast_forward_inputs
                model.zero_grad(set_to_none=True)
                loss = loss_fn(kind, model, inp, tgt)
                loss.backward()
                step_loss += float(loss)
                for n, p in model.named_parameters():
                    if p.requires_grad and p.grad is not None:
                        acc[n] += p.grad.float()
        for n, q in zip(trainable, mp):
            q.grad = acc[n] / (world * ga)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(mp, clip)
        opt.step()
        if losses is not None:
            losses.append(step_loss / (world * ga))
        if after_step is not None:
            with torch.no_grad():
                for n, p in model.named_parameters():
                    p.copy_(main[n].to(p.dtype))
            after_step(step, model, main)
    return {n: q.detach().clone() for n, q in zip(trainable, mp)} | {
        n: main[n] for n in main if n not in trainable}


# ---- evaluation and writes between steps (issue 29) ----------------------
UNSHARD_STEP = 4  # the step after which the tests write params inside unshard()


def evaluate(kind, model, step, st=None, steps=10):
    """Evaluation between steps, on the same held-out batch on every rank:
    the loss under torch.no_grad(), torch.inference_mode(), or model.eval()
    with grad enabled (by step; st None: a plain module, whose floating inputs are cast to its param
    dtype as flexplan's cast_forward_inputs does), and for a language model a greedy generation loop
    (many no-grad forwards, the tokens compared as losses). Returns a list."""
    inp, tgt = batch(kind, 100000 + max(step, 0))
    if st is None and inp.is_floating_point():  # the reference: as flexplan's cast_forward_inputs
        inp = inp.to(next(model.parameters()).dtype)
    mode = step % 3
    out = []
    if mode == 0:
        with torch.no_grad():
            out.append(float(loss_fn(kind, model, inp, tgt)))
    elif mode == 1:
        with torch.inference_mode():
            out.append(float(loss_fn(kind, model, inp, tgt)))
    else:
        model.eval()
        try:
            out.append(float(loss_fn(kind, model, inp, tgt).detach()))  # grad enabled, no backward
        finally:
            model.train()
    if kind in LM_KINDS and step in (-1, steps // 2, steps - 1):
        ids = inp[:1, :4]
        with torch.no_grad():
            for _ in range(4):  # greedy decoding: one forward per token
                logits = model(input_ids=ids).logits[:, -1].float()
                out.append(float(logits.max()))
                ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
        out.extend(float(t) for t in ids[0, 4:])
    return out


def unshard_edits(kind):
    return ["model.layers.0.self_attn.o_proj.weight", "model.embed_tokens.weight"] if kind in LM_KINDS else \
        ["layers.0.weight", "layers.2.bias"]


def edit(name, t):
    """the writes made inside unshard(): halve one weight, shift another"""
    return t * 0.5 if name.endswith("weight") and "layers" in name else t + 0.0625


# ---- mixture of experts: units and params a step's forward skips -----------
MOE_DIM, MOE_EXPERTS, MOE_TOPK = 16, 8, 2


class Expert(nn.Module):
    def __init__(self, dim=MOE_DIM, hidden=24):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


class MoELayer(nn.Module):
    """top-2 routing over 8 experts (nn.ModuleList), the loop over experts
    that received a token as transformers' Mixtral ran it before v5: an
    expert no token was routed to is not called."""

    def __init__(self, dim=MOE_DIM, experts=MOE_EXPERTS, top_k=MOE_TOPK):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(Expert(dim) for _ in range(experts))

    def forward(self, h):
        probs = torch.softmax(self.router(h).float(), -1)
        w, idx = torch.topk(probs, self.top_k, -1)
        self.last_routing = idx  # for the tests: which experts got tokens
        w = (w / w.sum(-1, keepdim=True)).to(h.dtype)
        out = torch.zeros_like(h)
        for e, ex in enumerate(self.experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            out = out.index_add(0, tok, ex(h[tok]) * w[tok, slot, None])
        return h + out


class MoE(nn.Module):
    """embed -> MoE layer -> a branch taken only when the batch's mean
    activation is positive (data-dependent, per rank) -> head"""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(MLP_DIMS[0], MOE_DIM)
        self.moe = MoELayer()
        self.branch = nn.Linear(MOE_DIM, MOE_DIM)
        self.head = nn.Linear(MOE_DIM, MLP_DIMS[-1])

    def forward(self, x):
        h = self.moe(self.embed(x))
        if float(h.float().mean()) > 0:
            h = h + torch.tanh(self.branch(h))
        return self.head(h)


def moe(seed=0):
    torch.manual_seed(seed)
    return MoE()


# one unit per layer (an expert without tokens: params without grad inside
# a unit that ran), or one unit per expert (a unit the forward skips)
MOE_UNITS = ["embed", "moe", "branch", "head"]
MOE_EXPERT_UNITS = ["embed", "moe.router"] + [f"moe.experts.{e}" for e in range(MOE_EXPERTS)] + ["branch", "head"]


def tiny_moe_lm(family, seed=0):
    """transformers' Mixtral or Qwen2-MoE, tiny: 2 layers, 8 experts, top-2
    (Qwen2-MoE with its shared expert)."""
    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=48, num_hidden_layers=LAYERS,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  num_experts_per_tok=2, tie_word_embeddings=False, attn_implementation="eager")
    if family == "mixtral":
        from transformers import MixtralConfig, MixtralForCausalLM
        m = MixtralForCausalLM(MixtralConfig(num_local_experts=8, **common))
    else:
        from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM
        m = Qwen2MoeForCausalLM(Qwen2MoeConfig(num_experts=8, moe_intermediate_size=24,
                                               shared_expert_intermediate_size=32, decoder_sparse_step=1,
                                               **common))
    torch.manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.uniform_(0.8, 1.2)
            elif p.dim() >= 2 and ("experts" in n or "gate" in n):
                p.normal_(0, 0.2)  # visible routing: some experts get no token
    return m


MOE_LM_UNITS = ["model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm", "lm_head"]
