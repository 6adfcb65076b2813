"""Figures quoted by the worked examples of the documentation, measured (the record behind them).

Not a comparison: each part runs the computation a page describes and writes what it printed,
so that the page can quote it from ``benchmarks/records/doc_examples.json``:

    first_model     docs/index.md's first model, exactly as written there: PCD with ULA (k = 10,
                    step 0.01) on the eight-Gaussians toy set, ``MLPEnergy(2, (64, 64))``, Adam
                    2e-3, 500 steps of batch 128, seed 0; then the grid-normalised test
                    log-likelihood of 2,000 fresh draws (resolution 128) and the data's own
                    density on the same points (``true_log_likelihood``).
    grid_abs        docs/data-and-evaluation.md's grid example: ``E = |x| + |y|`` on
                    ``[-6, 6]^2`` at ``n = 64``, against the exact
                    ``log Z = 2 log(2 (1 - e^-6))``: the actual error of the midpoint value, the
                    reported ``stderr`` (the change from the ``n/2`` grid) and the error of the
                    Richardson value.
    eight_gaussians the same page's sanity check: the true eight-Gaussians energy on the grid
                    (default resolution) against ``true_log_likelihood`` on 5,000 draws (seed 0).
    ptb_padding     docs/text-data.md: the share of padding cells in PTB train encoded as one
                    ``(B, T)`` tensor and in ``sentence_batches(data, 32)`` (seed 0).

Run: ``python benchmarks/doc_examples.py [--threads N]`` (under a minute; PTB from ``$EBMS_DATA``).
``--quick`` runs the same and writes no record.
"""

from __future__ import annotations

import math
import tempfile
import warnings
from typing import Any

import _common as C
import _speed_record as SR
import torch

from ebms.data import get_toy
from ebms.energy import from_fn
from ebms.estimators import grid_log_likelihood, true_log_likelihood
from ebms.estimators.grid import grid_log_partition
from ebms.nets import MLPEnergy
from ebms.objectives import PersistentContrastiveDivergence, ReplayBuffer
from ebms.samplers import ULA
from ebms.spaces import Box
from ebms.train import Trainer


def _est(e: Any) -> dict[str, float]:
    return {"estimate": float(e.estimate), "stderr": float(e.stderr)}


def first_model() -> dict[str, Any]:
    """docs/index.md's first model (the same code, the run folder in a temporary directory)."""
    torch.manual_seed(0)
    data = get_toy("eight_gaussians")
    model = MLPEnergy(2, hidden=(64, 64))
    chains = ReplayBuffer(2000, Box(2, low=-3.4, high=3.4))
    objective = PersistentContrastiveDivergence(ULA(step_size=0.01), chains, k=10)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(objective, model, lambda n, g: data.sample(n, generator=g),
                          optimizer=lambda groups: torch.optim.Adam(groups, lr=2e-3),
                          steps=500, batch_size=128, run_dir=run_dir, progress=False)
        result = trainer.fit()
    test = data.sample(2000, generator=torch.Generator().manual_seed(1))
    ll = grid_log_likelihood(model, test, data.bounds, resolution=128)
    return {"step": result.step, "gap": float(result.metrics["gap"]), "test_ll": _est(ll),
            "true_ll": _est(true_log_likelihood(data, test))}


def grid_abs() -> dict[str, float]:
    """Midpoint rule on ``E = |x| + |y|`` over ``[-6, 6]^2`` at ``n = 64`` against the exact log Z."""
    energy = from_fn(lambda x: x.abs().sum(-1))
    exact = 2.0 * math.log(2.0 * (1.0 - math.exp(-6.0)))
    with warnings.catch_warnings():  # the box holds all but e^-6 of each axis: the page's point is the grid error
        warnings.simplefilter("ignore", RuntimeWarning)
        est = grid_log_partition(energy, ((-6.0, 6.0), (-6.0, 6.0)), resolution=64)
    rich = est.settings["richardson"]
    return {"exact_log_z": exact, "estimate": float(est.estimate), "actual_error": abs(float(est.estimate) - exact),
            "reported_error": float(est.stderr),
            "richardson_error": None if rich is None else abs(float(rich) - exact)}


def eight_gaussians() -> dict[str, Any]:
    """The true eight-Gaussians energy on the grid against the data's own density (5,000 draws, seed 0)."""
    ds = get_toy("eight_gaussians")
    test = ds.sample(5000, generator=torch.Generator().manual_seed(0))
    ll = grid_log_likelihood(ds.true_energy(), test, ds.bounds)
    ref = true_log_likelihood(ds, test)
    return {"grid_ll": _est(ll), "true_ll": _est(ref), "difference": abs(float(ll.estimate) - float(ref.estimate)),
            "log_z_error": float(ll.settings["log_z_error"])}


def ptb_padding() -> dict[str, Any]:
    """Share of padding cells: PTB train as one tensor, and in length-bucketed batches of 32."""
    from ebms.data.text import Vocabulary, ptb, sentence_batches

    sents = ptb("train")
    data = Vocabulary.build(sents).encode(sents)
    tokens = int(data.lengths.sum())
    full = data.tokens.numel()
    batches = sentence_batches(data, 32, generator=torch.Generator().manual_seed(0))
    cells = sum(b.tokens.numel() for b in batches)
    return {"sentences": int(data.tokens.shape[0]), "longest": int(data.tokens.shape[1]), "tokens": tokens,
            "padding_one_tensor": 1.0 - tokens / full, "padding_batches_of_32": 1.0 - tokens / cells,
            "batches": len(batches)}


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0])
    rec = SR.start("doc_examples", args)
    parts: dict[str, Any] = {}
    for name, fn in (("first_model", first_model), ("grid_abs", grid_abs), ("eight_gaussians", eight_gaussians),
                     ("ptb_padding", ptb_padding)):
        try:
            parts[name] = fn()
        except FileNotFoundError as exc:  # PTB absent: the other parts still count
            C.note(f"[doc_examples] skipping {name}: {exc}")
            parts[name] = None
        C.note(f"[doc_examples] {name}: {parts[name]}")
    record = {"bench": "doc_examples", "quick": args.quick, "machine": C.machine_info(), **parts}
    SR.finish(rec, args, record, notes=(
        "Values printed by the documentation's worked examples (docs/index.md, docs/data-and-evaluation.md, "
        "docs/text-data.md), one deterministic run each (seeds as in the pages). Log-likelihoods in nats per "
        "point; padding as a fraction of the cells."))
    C.emit_final_line({"bench": "doc_examples", "quick": args.quick,
                       **{k: (v is not None) for k, v in parts.items()}})


if __name__ == "__main__":
    main()
