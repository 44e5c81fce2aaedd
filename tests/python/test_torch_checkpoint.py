"""flexplan.torch's checkpoints through torch.distributed.checkpoint
(flexplan.torch.state_dict / load_state_dict; docs/torch.md, "Checkpoints").

- the boxes: a flat range of a row-major tensor becomes boxes that cover it
  exactly (a partial row, whole rows, a partial row, recursively);
- ckpt_worker.py under mpiexec: train on 2 ranks, DCP save, round trip bit
  for bit; resume on 1, 3 and 4 ranks with other plans (strategies, flat
  buckets and per-param collectives, ragged / owned / dim-1 / replicated
  placements, hybrid), also through load_in_place and from full tensors:
  main weights, AdamW / SGD-momentum state and step equal the saved ones bit
  for bit (gathered from the arena, against full tensors rank 0 wrote before
  saving), compute copies recast, and the next losses equal the
  uninterrupted run's; round trips on each of those rank counts; fp32 and
  bf16 params;
- Hugging Face folders (save_pretrained, an index and several shards; one
  bf16 file) into shard(meta module, plan, init=DIR): equal to
  from_pretrained's params bit for bit, each rank reading only its extents;
  a missing or extra tensor is a FlexplanError naming it; init="module"
  (in memory) equals the module;
- interop with real FSDP2 on gloo (fsdp2_dcp.py), both ways: FSDP2's
  checkpoint (fully_shard, get_state_dict, dcp.save) loads into flexplan.torch
  and flexplan.torch's into FSDP2 (set_state_dict), weights and AdamW state
  (exp_avg, exp_avg_sq, step) compared bit for bit;
- corrupt and partial checkpoints (a missing file, a truncated file, garbled
  metadata) and a state dict wrong on one rank: every rank raises and no
  rank's weights or optimizer state change.
"""
import itertools
import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.checkpoint")

from flexplan.torch.checkpoint import flat_boxes, _extent_boxes  # noqa: E402
from torch_mpi import run_mpi  # noqa: E402

CONFIGS = ["mlp_adamw", "mlp_sgd", "mlp_bf16", "llama_adamw", "llama_hybrid", "mlp_per_param"]


def _cover(shape, boxes):
    n = 1
    for s in shape:
        n *= s
    seen = torch.zeros(n, dtype=torch.int32).view(shape)
    for off, sz, fs in boxes:
        idx = tuple(slice(o, o + s) for o, s in zip(off, sz))
        seen[idx] += 1
        # contiguous in the flat tensor, starting at fs
        ar = torch.arange(n).view(shape)[idx].reshape(-1)
        assert torch.equal(ar, torch.arange(fs, fs + ar.numel()))
    return seen.view(-1)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (4, 3, 5), (2, 3, 2, 4)])
def test_flat_boxes_cover_exactly(shape):
    n = 1
    for s in shape:
        n *= s
    for a, b in itertools.combinations(range(n + 1), 2):
        boxes = flat_boxes(shape, a, b - a)
        seen = _cover(shape, boxes)
        want = torch.zeros(n, dtype=torch.int32)
        want[a:b] = 1
        assert torch.equal(seen, want), (shape, a, b, boxes)
        assert len(boxes) <= 2 * (len(shape) - 1) + 1


def test_cut_rows_become_three_boxes():
    # a (4, 6) param, elements [3, 20): the rest of row 0, rows 1-2, the start of row 3
    assert flat_boxes((4, 6), 3, 17) == [((0, 3), (1, 3), 3), ((1, 0), (2, 6), 6), ((3, 0), (1, 2), 18)]


class _Ext:
    def __init__(self, runs, len_, shard_stride, full_off, full_stride, last_len=None):
        self.runs, self.len, self.shard_stride, self.full_off, self.full_stride = \
            runs, len_, shard_stride, full_off, full_stride
        self.last_len = len_ if last_len is None else last_len

    def pairs(self):
        return [(k * self.shard_stride, self.full_off + k * self.full_stride,
                 self.last_len if k == self.runs - 1 else self.len) for k in range(self.runs)]


def test_dim1_shard_runs_are_one_box():
    # shard dim 1 of (5, 8) over 4 ranks, rank 2: 5 runs of 2 at column 4, one (5, 2) box
    shard = torch.arange(10.)
    boxes = _extent_boxes((5, 8), _Ext(5, 2, 2, 4, 8))
    assert len(boxes) == 1 and boxes[0][:2] == ((0, 4), (5, 2))
    off, sz, so, ss = boxes[0]
    assert torch.equal(shard.as_strided(sz, ss, so), shard.view(5, 2))


def test_short_last_block_boxes():
    # block-cyclic rows of (20, 13) in blocks of 8 over 2 ranks, rank 0: rows 0-7, then the short
    # last block, rows 16-19 (52 elements at shard element 104): two boxes
    shard = torch.arange(156.)
    boxes = _extent_boxes((20, 13), _Ext(2, 104, 104, 0, 208, 52))
    assert [b[:3] for b in boxes] == [((0, 0), (8, 13), 0), ((16, 0), (4, 13), 104)]
    assert torch.equal(shard.as_strided(boxes[1][1], boxes[1][3], boxes[1][2]), shard[104:].view(4, 13))


def _check(rc, out, n):
    assert rc == 0 and "FAIL" not in out, out[-6000:]
    assert out.count("PASS") >= n, out[-6000:]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("dcp"))
    import fsdp2_dcp  # FSDP2 on 2 ranks saves DIR/fsdp2_mlp (the 3-rank run loads it)
    fsdp2_dcp.run("save", 2, d, "mlp")
    make_hf(d)
    rc, out = run_mpi(2, "ckpt_worker.py", "save,corrupt,hf", d, *CONFIGS, timeout=400)
    print(out[-3000:])
    _check(rc, out, 2 * (len(CONFIGS) + 2))
    assert "PASS hf" in out
    return d


def make_hf(d):
    """Hugging Face folders for ckpt_worker's hf phase: save_pretrained with a
    small max_shard_size (an index and several shard files, fp32), one
    model.safetensors in bf16, and two single files: one lacking a param, one
    with a tensor the module does not have"""
    import torch_models as tm
    from safetensors.torch import save_file
    m = tm.tiny_llama(seed=1)
    m.save_pretrained(os.path.join(d, "hf_sharded"), max_shard_size="20KB")
    with open(os.path.join(d, "hf_sharded", "model.safetensors.index.json")) as f:
        assert len(set(json.load(f)["weight_map"].values())) > 2
    tm.tiny_llama(seed=2).to(torch.bfloat16).save_pretrained(os.path.join(d, "hf_bf16"))
    sd = {k: v.detach().contiguous() for k, v in m.state_dict().items() if k != "lm_head.weight"}
    for tag, t in (("hf_missing", {k: v for k, v in sd.items() if k != "model.norm.weight"}),
                   ("hf_extra", dict(sd, **{"extra.bias": torch.zeros(3)}))):
        os.makedirs(os.path.join(d, tag))
        save_file(t, os.path.join(d, tag, "model.safetensors"), metadata={"format": "pt"})
    return d


def test_save_round_trip_and_corrupt_on_2_ranks(saved):
    assert os.path.exists(os.path.join(saved, "mlp_adamw", ".metadata"))


@pytest.mark.parametrize("n", [1, 3, 4])
def test_resume_on_another_world_size(saved, n):
    # on 3 ranks also: FSDP2's checkpoint (2 ranks) loads into both plans of mlp_adamw
    rc, out = run_mpi(n, "ckpt_worker.py", "load,fsdp2" if n == 3 else "load", saved, *CONFIGS, timeout=400)
    print(out[-3000:])
    _check(rc, out, n * len(CONFIGS) + (n if n == 3 else 0))
    if n == 3:
        assert "PASS fsdp2 mlp_adamw" in out


def test_fsdp2_loads_flexplan_checkpoint(saved):
    """flexplan.torch's checkpoint (2 ranks, a flat bucket cutting rows)
    into real FSDP2 on 3 ranks: get_state_dict + dcp.load + set_state_dict;
    FSDP2's full weights, AdamW state and step equal flexplan's bit for bit"""
    import fsdp2_dcp
    ok = os.path.join(saved, "mlp_adamw.fsdp2_ok")
    fsdp2_dcp.run("load", 3, saved, "mlp", "mlp_adamw")
    assert os.path.exists(ok)


def test_hf_folder_errors(tmp_path):
    """a folder that is not a Hugging Face checkpoint, an index naming a
    file that is not there, a shard holding a tensor its index does not
    list: FlexplanError naming the file or tensor"""
    from flexplan import FlexplanError
    from flexplan.torch._hf import hf_files
    from safetensors.torch import save_file
    with pytest.raises(FlexplanError, match="neither model.safetensors.index.json nor model.safetensors"):
        hf_files(tmp_path)
    idx = tmp_path / "model.safetensors.index.json"
    idx.write_text(json.dumps({"metadata": {}, "weight_map": {"a.weight": "model-1.safetensors"}}))
    with pytest.raises(FlexplanError, match="'a.weight' is in 'model-1.safetensors', which is not a file"):
        hf_files(tmp_path)
    save_file({"a.weight": torch.zeros(2), "b.weight": torch.zeros(2)}, str(tmp_path / "model-1.safetensors"))
    with pytest.raises(FlexplanError, match="'b.weight' is not in model.safetensors.index.json"):
        hf_files(tmp_path)
    idx.write_text(json.dumps({"weight_map": {"a.weight": "model-1.safetensors",
                                              "b.weight": "model-1.safetensors"}}))
    assert sorted(hf_files(tmp_path)) == ["a.weight", "b.weight"]
    idx.write_text("{not json")
    with pytest.raises(FlexplanError, match="not a safetensors index"):
        hf_files(tmp_path)
    # a shard that is no safetensors file: the library's reader says why, located in its header
    idx.write_text(json.dumps({"weight_map": {"a.weight": "model-1.safetensors"}}))
    bad = tmp_path / "model-1.safetensors"
    hdr = b'{"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},}'
    bad.write_bytes(len(hdr).to_bytes(8, "little") + hdr + bytes(8))
    with pytest.raises(FlexplanError, match=r"^" + str(bad) + r": header rejected at header byte \d+: ") as e:
        hf_files(tmp_path)
    assert e.value.status_name == "FP_ERR_WEIGHTS"
