"""Data-parallel TRF training by NCE: two gloo ranks under torchrun against one process with the
global batch (configuration and worker in ``_ddp_trf_worker.py``).

**Why exact equality needs the noise supplied.** :class:`~ebms.objectives.trf_nce.TRFNCE` draws
``round(nu B)`` noise sentences per call from the trainer's generator, and the trainer seeds one
generator per rank (``seed`` on rank 0, a seed derived from ``(seed, rank)`` elsewhere). The noise
is independent of the data rows, and a vectorised draw of ``2N`` sentences is not the
concatenation of two draws of ``N`` from other streams, so with its own draws a two-rank run is a
different realisation of the same random algorithm: equal to one process in law, not in value.
(Making the values equal would need every rank to draw the global noise and keep its share,
``world_size`` times the sampling that dominates NCE's cost.) Hence two properties:

1. **Exact up to summation order**, with the noise supplied deterministically
   (:class:`~_ddp_trf_worker.ShardNoise`: call ``t`` of rank ``r`` draws shard ``r``; one process
   draws shards 0 and 1): rank ``r`` takes rows ``[rB, (r + 1)B)`` of each permuted global batch
   and its share of the noise, per-rank means with equal counts average to the global means, and
   gradients are averaged over ranks, so the parameters after 20 Adam steps equal the one-process
   run's. Negative control: one process with the per-rank batch ends elsewhere.
2. **Equal in law** with the objective's own per-rank noise: the final parameters of 40 two-rank
   runs and 40 one-process runs (disjoint seeds, so independent groups) have equal means,
   coordinate by coordinate (Welch t-test, Bonferroni over the coordinates). Marked slow (about
   40 s on two busy cores); the exact test runs in about 17 s, mostly torchrun's start.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import safetensors.torch
import torch
from _ddp_trf_worker import BATCH, NU, SEEDS, SETTINGS, ShardNoise, noise_lm, parameters, trainer
from _train_helpers import metric_lines, run_torchrun

from ebms.objectives.trf_nce import TRFNCE
from ebms.train import DistributedContext

WORKER = Path(__file__).with_name("_ddp_trf_worker.py")
ONE = DistributedContext()


def _run_worker(out: Path, mode: str) -> None:
    """Run the two-rank worker in ``mode``."""
    run_torchrun(WORKER, str(out), mode)


@pytest.fixture(scope="module")
def ddp_trf_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ddp_trf")
    _run_worker(out, "det")
    return out


@pytest.mark.slow  # two gloo processes: ~10 s of set-up
def test_two_gloo_ranks_match_one_process_for_trf_nce(ddp_trf_out: Path, tmp_path: Path) -> None:
    one = trainer(TRFNCE(ShardNoise(noise_lm(), (0, 1)), nu=NU), tmp_path / "one",  # type: ignore[arg-type]
                  batch_size=2 * BATCH, distributed=ONE)
    one.fit()
    want = parameters(one)
    got = safetensors.torch.load_file(ddp_trf_out / "det.safetensors")
    assert set(got) == set(want) == {"log_z", "field.weight"}
    for k in want:  # float32 parameters, float summation order only
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6, msg=k)
    # the logged numbers agree too (rank means of per-rank means with equal counts); e_neg and gap
    # are means over the noise draws inside the lengths, whose count differs between ranks
    lines_two, lines_one = metric_lines(ddp_trf_out / "det"), metric_lines(tmp_path / "one")
    assert [r["step"] for r in lines_two] == [r["step"] for r in lines_one] == list(range(2, SETTINGS["steps"] + 1, 2))
    for a, b in zip(lines_two, lines_one):
        for key in ("loss", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), (a["step"], key)
        for key in ("accuracy", "e_pos", "noise_outside"):
            assert a["metrics"][key] == pytest.approx(b["metrics"][key], rel=1e-5, abs=1e-6), (a["step"], key)
    # training moved the parameters, and the layout matters: one process with the per-rank batch
    # and rank 0's noise (negative control) ends elsewhere
    start = parameters(trainer(TRFNCE(noise_lm(), nu=NU), None, distributed=ONE))
    assert float((want["field.weight"] - start["field.weight"]).abs().max()) > 0.3
    other = trainer(TRFNCE(ShardNoise(noise_lm(), (0,)), nu=NU), None, distributed=ONE)  # type: ignore[arg-type]
    other.fit()
    assert float((parameters(other)["field.weight"] - got["field.weight"]).abs().max()) > 1e-2


@pytest.mark.slow  # 40 + 40 short runs, about 40 s on two busy cores
def test_two_ranks_with_their_own_noise_agree_in_law_with_one_process(tmp_path: Path) -> None:
    from scipy import stats

    _run_worker(tmp_path, "stat")
    two = safetensors.torch.load_file(tmp_path / "stat.safetensors")
    runs_two = torch.stack([torch.cat([two[f"{s}/log_z"], two[f"{s}/field.weight"]]) for s in SEEDS["two"]])
    runs_one = []
    for seed in SEEDS["one"]:
        t = trainer(TRFNCE(noise_lm(), nu=NU), None, batch_size=2 * BATCH, seed=seed, guard=None, distributed=ONE)
        t.fit()
        p = parameters(t)
        runs_one.append(torch.cat([p["log_z"], p["field.weight"]]))
    a, b = runs_two.double(), torch.stack(runs_one).double()
    n_a, n_b, dim = a.shape[0], b.shape[0], a.shape[1]
    var_a, var_b = a.var(0) / n_a, b.var(0) / n_b
    t_stat = (a.mean(0) - b.mean(0)) / (var_a + var_b).sqrt()
    df = (var_a + var_b) ** 2 / (var_a**2 / (n_a - 1) + var_b**2 / (n_b - 1))  # Welch-Satterthwaite
    # two-sided, family-wise level 0.001 over the coordinates (Bonferroni): |t| < 4.3 for 19
    # coordinates and about 78 degrees of freedom (observed max |t| 2.1)
    limit = torch.tensor([stats.t.ppf(1 - 0.0005 / dim, float(d)) for d in df], dtype=torch.float64)
    assert bool((t_stat.abs() < limit).all()), (t_stat, limit)
    # the runs do differ from seed to seed (the check has something to compare)
    assert float(a.std(0).min()) > 1e-3 and math.isfinite(float(t_stat.abs().max()))
