#!/usr/bin/env python3
"""sim_parity.py (label simdev) - train_mlp on the NCCL backend, running on
the simulated CUDA device (tests/simdev/, docs/simdev.md), against the MPI
backend's run of the same plan, at N ranks.

Compiles tests/mpi/<model>.model.json with tests/mpi/<spec>.spec.json for N
ranks (and --policy), runs train_mlp (MPI backend) once as the reference,
then train_mlp_simdev (NCCL backend) in each --modes (eager, graph: step 0
eager then captured graphs, capture: the trainer capturing whole steps) under
each scheduler seed of --seeds, every run with --check (every step against
train_mlp's single-process reference, the gathered weights bit for bit) and a
refit before --refit-at (after the graphs were captured). Then every run's
main-weight shards must equal the MPI run's: byte for byte at 1 and 2 ranks;
at 3 and 4 ranks within 1e-5 relative (MPI and NCCL may sum three or more
ranks in different orders). Prints the distinct scheduling orders the seeds
reached (the simulator's order hash per rank 0).

--expect-fail: the runs must fail (a mutation test: some seed of --seeds must
catch the planted bug); prints which seeds caught it.
--trainer-args: extra train_mlp arguments for the simulated runs (a=b is a b).
--env NAME=VALUE: an environment variable for the simulated runs (a planted bug).
--no-check: no --check (MXFP8 gathers are lossy by design: only the MPI run is the reference).
--sim-exact: besides, every simulated run must equal the first one byte for byte, at any N (the
simulated NCCL sums in one fixed order whatever the scheduler and the mode: a captured step that
computes anything else is caught even where the MPI comparison has a tolerance); prints whether
the runs also equal the MPI run byte for byte.
--expect-error REGEX: every run must fail with REGEX in its output (a planted capture mistake,
train_mlp --plant: the error must be caught, and say what happened).

usage: sim_parity.py --flexplan EXE --train EXE --train-sim EXE --mpiexec "MPIEXEC;NPFLAG;PREFLAGS..."
                     --dir tests/mpi --model M --spec S --np N [--policy P] [--seeds 1,2,3]
                     [--modes eager,graph,capture] [--steps K] [--refit-at K] [--expect-fail]
                     [--mutate-plan CMD] [--trainer-args "..."]
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile


def read_dump(path):
    """safetensors of u8 tensors: name -> bytes"""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    head = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = body[a:b]
    return out


def values(b, dtype):
    if dtype == "fp32":
        return struct.unpack(f"<{len(b) // 4}f", b)
    if dtype in ("bf16", "fp16"):
        raw = struct.unpack(f"<{len(b) // 2}H", b)
        if dtype == "bf16":
            return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in raw]
        return [struct.unpack("<e", struct.pack("<H", h))[0] for h in raw]
    return list(b)


def compare(ref, got, dtypes, exact):
    bad = []
    for name, rb in ref.items():
        gb = got.get(name)
        if gb is None or len(gb) != len(rb):
            bad.append(f"{name}: missing or of another size")
            continue
        if exact or rb == gb:
            if rb != gb:
                bad.append(f"{name}: bytes differ")
            continue
        rv, gv = values(rb, dtypes[name]), values(gb, dtypes[name])
        for k, (x, y) in enumerate(zip(rv, gv)):
            if abs(x - y) > 1e-5 * max(abs(x), abs(y)) + 1e-7:
                bad.append(f"{name}[{k}]: {y!r} against the MPI run's {x!r}")
                break
    return bad


def main():
    ap = argparse.ArgumentParser()
    for a in ("--flexplan", "--train", "--train-sim", "--mpiexec", "--dir", "--model", "--spec"):
        ap.add_argument(a, required=True)
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--policy", default="flexplan")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--modes", default="eager,graph,capture")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--refit-at", type=int, default=2)
    ap.add_argument("--expect-fail", action="store_true")
    ap.add_argument("--mutate-plan", default="", help="a command run on the plan's path before the simulated runs")
    ap.add_argument("--trainer-args", default="")
    ap.add_argument("--no-check", action="store_true", help="no --check (MXFP8 gathers are lossy by design)")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the simulated runs only")
    ap.add_argument("--sim-exact", action="store_true", help="every simulated run equals the first, byte for byte")
    ap.add_argument("--expect-error", default="", help="every run fails with this regex in its output")
    a = ap.parse_args()
    mpiexec = a.mpiexec.split(";")
    with open(os.path.join(a.dir, a.spec + ".spec.json")) as f:
        spec = json.load(f)
    mesh = spec.setdefault("mesh", {})
    mesh["world_size"] = a.np
    if mesh.get("ranks_per_node", 1) > a.np or a.np % mesh.get("ranks_per_node", 1):
        mesh.pop("ranks_per_node", None)
    seeds = [int(s) for s in a.seeds.split(",")]
    modes = a.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="fp-simdev-") as tmp:
        sp, plan = os.path.join(tmp, "spec.json"), os.path.join(tmp, "plan.json")
        with open(sp, "w") as f:
            json.dump(spec, f)
        r = subprocess.run([a.flexplan, "compile", os.path.join(a.dir, a.model + ".model.json"), "--spec", sp,
                            "--policy", a.policy, "-o", plan], stdout=subprocess.DEVNULL)
        if r.returncode:
            print("sim_parity: flexplan compile failed", file=sys.stderr)
            return 1
        with open(plan) as f:
            dtypes = {p["name"]: p["main_dtype"] for p in json.load(f)["params"]}
        env = dict(os.environ, TMPDIR=tmp, FP_SIMDEV_HANG_S=os.environ.get("FP_SIMDEV_HANG_S", "60"))

        def run(exe, prefix, extra, seed=None):
            cmd = [mpiexec[0], mpiexec[1], str(a.np), *mpiexec[2:], exe, "--plan", plan, "--steps", str(a.steps),
                   "--refit-at", str(a.refit_at), *([] if a.no_check else ["--check"]), "--dump", prefix, *extra]
            e = dict(env)
            if seed is not None:
                e["FP_SIMDEV_SEED"] = str(seed)
                e.update(kv.split("=", 1) for kv in a.env)
            p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=240)
            return p, cmd

        p, cmd = run(a.train, os.path.join(tmp, "mpi"), ["--backend", "mpi"])
        if p.returncode:
            print(" ".join(cmd), "\n", p.stdout, p.stderr, file=sys.stderr)
            print("sim_parity: the MPI reference run failed", file=sys.stderr)
            return 1
        ref = [read_dump(os.path.join(tmp, f"mpi.rank{r}.safetensors")) for r in range(a.np)]
        if a.mutate_plan:
            subprocess.run(a.mutate_plan.split() + [plan], check=True)
        orders, failed, caught = set(), [], []
        first, mpi_exact = None, True
        for mode in modes:
            for seed in seeds:
                prefix = os.path.join(tmp, f"{mode}-{seed}")
                extra = ["--backend", "nccl", "--mode", mode, *a.trainer_args.replace("=", " ").split()]
                p, cmd = run(a.train_sim, prefix, extra, seed)
                h = re.findall(r"simdev: seed \d+: (\d+) device steps, order hash ([0-9a-f]+)", p.stderr)
                if h:
                    orders.add(h[0][1])
                what = f"{mode}, seed {seed}"
                bad = []
                if a.expect_error:
                    if not p.returncode or not re.search(a.expect_error, p.stdout + p.stderr):
                        print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
                        failed.append(f"{what}: exit {p.returncode}, expected a failure matching {a.expect_error!r}")
                    else:
                        caught.append(what)
                        msg = re.search(".*(" + a.expect_error + ").*", p.stdout + p.stderr).group(0)
                        print(f"sim_parity: {what}: failed as expected: {msg.strip()[:400]}", flush=True)
                    continue
                if p.returncode:
                    bad = [f"exit {p.returncode}"]
                else:
                    for r in range(a.np):
                        got = read_dump(f"{prefix}.rank{r}.safetensors")
                        bad += [f"rank {r}: {b}" for b in compare(ref[r], got, dtypes, a.np <= 2)]
                        mpi_exact = mpi_exact and got == ref[r]
                        if a.sim_exact:
                            if first is None or len(first) <= r:
                                first = (first or []) + [got]
                            else:
                                bad += [f"rank {r}: against the first simulated run: {b}"
                                        for b in compare(first[r], got, dtypes, True)]
                if bad:
                    caught.append(what)
                    if not a.expect_fail:
                        print(" ".join(cmd), file=sys.stderr)
                        print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
                        failed.append(f"{what}: {'; '.join(bad[:3])}")
                print(f"sim_parity: {a.model}/{a.spec} np {a.np} {what}: {'DIFFERS: ' + bad[0] if bad else 'ok'}",
                      flush=True)
        print(f"sim_parity: {len(orders)} distinct scheduling orders over {len(modes) * len(seeds)} runs")
        if a.expect_error:
            if failed:
                print("sim_parity: FAIL:\n  " + "\n  ".join(failed), file=sys.stderr)
                return 1
            print(f"sim_parity: ok: every run failed with {a.expect_error!r}")
            return 0
        if a.expect_fail:
            if not caught:
                print("sim_parity: FAIL: the planted bug was not caught under any seed", file=sys.stderr)
                return 1
            print(f"sim_parity: ok: the planted bug was caught ({len(caught)} of {len(modes) * len(seeds)} runs): "
                  f"{', '.join(caught)}")
            return 0
        if failed:
            print("sim_parity: FAIL:\n  " + "\n  ".join(failed), file=sys.stderr)
            return 1
        print(f"sim_parity: ok: {a.model}/{a.spec} ({a.policy}) at {a.np} ranks: {', '.join(modes)} x seeds {a.seeds} "
              f"equal the MPI run" + (" and each other, byte for byte" if a.sim_exact else "") +
              f"; the MPI run's bytes: {'equal' if mpi_exact else 'within 1e-5 (its sums in another order)'}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
