"""examples/torch/train_gpt.py on 2 ranks: it trains (the loss falls), saves a
model that loads into a plain transformers Llama with the same loss on a
batch, and its measured timing record draws beside the modeled step
(`flexplan viz --measured`)."""
import os
import re
import subprocess

import torch
from safetensors.torch import load_file

from torch_mpi import run_mpi

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_train_gpt(tmp_path):
    pre = str(tmp_path / "run")
    save = str(tmp_path / "model.safetensors")
    rc, out = run_mpi(2, os.path.join(ROOT, "examples", "torch", "train_gpt.py"), "--steps", "25",
                      "--timing", pre, "--save", save, timeout=300)
    assert rc == 0, out[-4000:]
    losses = [float(x) for x in re.findall(r"step +\d+/25 \[[#.]+\] loss ([0-9.]+)", out)]
    assert len(losses) == 25, out[-4000:]
    assert losses[-1] < 0.75 * losses[0], losses
    # the saved file is a plain transformers checkpoint of the tied model
    sd = load_file(save)
    assert "model.embed_tokens.weight" in sd and "lm_head.weight" not in sd
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True)
    m = LlamaForCausalLM(cfg)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    m.tie_weights()
    assert torch.equal(m.lm_head.weight, sd["model.embed_tokens.weight"])
    # measured beside modeled
    cli = os.environ.get("FLEXPLAN_CLI") or os.path.join(ROOT, "build", "flexplan")
    r = subprocess.run([cli, "viz", pre + ".plan.json", "--measured", pre + ".rank0.json", "--measured", pre + ".rank1.json",
                        "-o", str(tmp_path / "trace.json")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert os.path.getsize(tmp_path / "trace.json") > 0
