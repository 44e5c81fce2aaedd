"""describe() over transformers families beyond Llama (issue 29, item 6):
GPT-2, Gemma-2, OLMo-2, Phi-3, Qwen2-MoE, Mamba2 and T5, tiny configs built
on the meta device, each described with the default units and compiled
(full_shard, 2 ranks); T5's default units all run (its shared embedding,
read through the encoder's and decoder's own modules, is no unit); and a
long sequence is traced at four short lengths and scaled, giving exactly
what a full-length trace gives (Llama: attention, quadratic; Mamba: a
per-token reference scan, linear)."""
import pytest
import torch

import flexplan
import flexplan.torch as fpt
import importlib

T = pytest.importorskip("transformers")
describe_mod = importlib.import_module("flexplan.torch._describe")

C = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0)
IDS = torch.zeros(1, 8, dtype=torch.long)

FAMILIES = {
    "gpt2": (lambda: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4,
                                                      n_positions=64)), None),
    "gemma2": (lambda: T.Gemma2ForCausalLM(T.Gemma2Config(head_dim=8, **C)), None),
    "olmo2": (lambda: T.Olmo2ForCausalLM(T.Olmo2Config(**C)), None),
    "phi3": (lambda: T.Phi3ForCausalLM(T.Phi3Config(**C)), None),
    "qwen2_moe": (lambda: T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=32,
        **C)), None),
    "mamba2": (lambda: T.Mamba2ForCausalLM(T.Mamba2Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_heads=4, head_dim=16, state_size=8, expand=2,
        n_groups=1, chunk_size=8)), None),
    "t5": (lambda: T.T5ForConditionalGeneration(T.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=48,
                                                            num_layers=2, num_heads=4)),
           {"input_ids": IDS, "decoder_input_ids": IDS}),
}
SPEC = {"format": "flexplan.spec.v1", "mesh": {"world_size": 2}, "strategy": "full_shard"}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_described_and_compiled(family):
    make, inputs = FAMILIES[family]
    with torch.device("meta"):
        model = make()
    js = fpt.describe(model, inputs, input_shape=(1, 8)) if inputs else fpt.describe(model, input_shape=(1, 8))
    names = [m["name"] for m in js["modules"]]
    assert len(names) >= 4, names
    assert set(js["forward_order"]) == set(names), (js["forward_order"], names)
    declared = [p["name"] for m in js["modules"] for p in m.get("params", [])]
    assert sorted(declared) == sorted(n for n, _ in model.named_parameters())
    plan = flexplan.compile(js, SPEC)
    try:
        assert plan.info["modules"] == len(names), (plan.info, names)
    finally:
        plan.close()
    if family == "t5":  # the default units ran: shared's params are the root's
        assert "shared" not in names and "root" in names, names


def llama():
    return T.LlamaForCausalLM(T.LlamaConfig(attn_implementation="eager", **C))


def mamba():
    return T.MambaForCausalLM(T.MambaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, state_size=8))


@pytest.mark.parametrize("make,length", [(llama, 200), (mamba, 160)])
def test_long_sequence_scaled_equals_full_trace(make, length, monkeypatch):
    with torch.device("meta"):
        model = make()
    scaled = fpt.describe(model, input_shape=(2, length))
    monkeypatch.setattr(describe_mod, "_scale", False)
    full = fpt.describe(model, input_shape=(2, length))
    assert scaled == full
    # and the trace really was the short one: the fit is not the identity
    monkeypatch.setattr(describe_mod, "_scale", True)
    short = fpt.describe(model, input_shape=(2, describe_mod.SCALE_ABOVE))
    assert short["modules"][1]["flops_fwd"] < scaled["modules"][1]["flops_fwd"]


def test_scaling_fit_checked(monkeypatch):
    """a unit whose cost is not quadratic in the length fails the fit's
    check at the fourth length and is traced at full length"""
    calls = []
    real = describe_mod._describe_with

    def spy(mod, module, inputs, *a):
        calls.append(int(inputs["input_ids"].shape[1]))
        js = real(mod, module, inputs, *a)
        if isinstance(js, dict):
            n = calls[-1]
            js["modules"][1]["flops_fwd"] += float(n ** 3)  # a cubic term
        return js
    monkeypatch.setattr(describe_mod, "_describe_with", spy)
    with torch.device("meta"):
        model = llama()
    fpt.describe(model, input_shape=(1, 200))
    assert calls == [16, 32, 48, 64, 200], calls
