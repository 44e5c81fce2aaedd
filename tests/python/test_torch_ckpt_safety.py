"""Checksummed, atomic checkpoints (issue 40; ckpt_kill.py on 2 ranks):
a rank killed at each point of save_checkpoint, into a new checkpoint_id
and over an existing one, leaves the whole old checkpoint (both load paths
load it bit for bit) or none (both refuse it, the module unchanged), never
a mixture; a flipped bit and a torn overwrite are refused naming the file,
the tensor and the byte range, the module unchanged."""
import os

from torch_mpi import run_mpi

# (rank, point) of save_checkpoint: before anything, after this rank's DCP data files
# but before DCP's metadata (where DCP's own in-place save leaves a mixture), after DCP's files, after the
# checksums were taken, after they were written and every file synced, between
# moving the old checkpoint aside and the new one into place (rank 0 renames)
POINTS = ["1:start", "1:wrote", "1:saved", "0:checksummed", "1:written", "0:swap"]
PATHS = ("load_in_place", "load_checkpoint")


def reports(d):
    """The result lines both ranks wrote (ckpt_kill.py's report files)."""
    lines = []
    for rank in (0, 1):
        p = os.path.join(d, f"report.{rank}")
        if os.path.exists(p):
            lines += open(p).read().splitlines()
    return lines


def results(d):
    r = {}
    for line in reports(d):
        for p in PATHS:
            if line.startswith(p + " ") and p not in r:
                r[p] = line
    return r


def load(d):
    rc, out = run_mpi(2, "ckpt_kill.py", "load", str(d), timeout=180)
    assert rc == 0, out[-4000:]
    r = results(d)
    assert set(r) == set(PATHS), out[-4000:]
    return r


def test_kill_points(tmp_path):
    seen = []
    for existing in (False, True):
        for kill in POINTS + [None]:
            if kill == "0:swap" and not existing:
                continue  # no old checkpoint to move aside
            d = tmp_path / f"{'existing' if existing else 'new'}-{(kill or 'none').replace(':', '-')}"
            d.mkdir()
            if existing:
                rc, out = run_mpi(2, "ckpt_kill.py", "save-old", str(d), timeout=180)
                assert rc == 0 and "SAVED" in out, out[-4000:]
            env = {"FLEXPLAN_CKPT_KILL": kill} if kill else {}
            rc, out = run_mpi(2, "ckpt_kill.py", "save-new", str(d), timeout=180, env=env)
            assert (rc != 0) == (kill is not None), out[-4000:]
            r = load(d)
            for p, line in r.items():
                seen.append(f"{d.name} {line[:160]}")
                assert "MIXED" not in line and " CHANGED" not in line, line
                if kill is None:
                    assert line == f"{p} LOADED new", line
                elif kill == "1:written" and line == f"{p} LOADED new":
                    pass  # everything was durable: rank 0 may finish the move before the job is torn down
                elif existing and kill != "0:swap":
                    assert line == f"{p} LOADED old", line  # the old checkpoint, whole
                else:
                    assert line.startswith(f"{p} REFUSED UNCHANGED"), line  # no checkpoint at the id
    print("\n".join(seen))


def test_corruption_refused(tmp_path):
    rc, out = run_mpi(2, "ckpt_kill.py", "corrupt", str(tmp_path), timeout=180)
    assert rc == 0, out[-4000:]
    print(out[-3000:])
    lines = reports(tmp_path)
    flipped = [l for l in lines if l.startswith("flipped ")]
    torn = [l for l in lines if l.startswith("torn ")]
    assert flipped and torn, out[-4000:]
    for l in flipped + torn:
        assert "REFUSED UNCHANGED" in l, l
    for p in PATHS:
        assert any(l.startswith(f"flipped {p} ") and "__0_0.distcp: bytes [" in l and "of layers.1.weight" in l
                   and "fail their checksum" in l for l in flipped), flipped
        assert any(l.startswith(f"torn {p} ") and "__1_0.distcp: bytes [" in l and "fail their checksum" in l
                   for l in torn), torn
