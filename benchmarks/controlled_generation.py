"""Controlled generation with energies on addition strings: plain LM sampling, mix-and-match and COLD, over seeds.

Workload (monograph §4.4.2; Mireshghallah et al. 2022, *Mix and match*; Qin et al. 2022, *COLD decoding*),
scaled to this machine:
    data        2-digit addition sentences ``a+b=s`` (:class:`ebms.data.AdditionTask`, 9 characters), 4000
                training sentences, a share 0.3 of their sums given one wrong digit (the imperfect base of
                issue 12).
    models      per seed: a base :class:`~ebms.models.lm.TransformerLM` (width 32, 2 layers) trained by maximum
                likelihood, and a :class:`~ebms.nets.TwoTowerCloze` (LSTM towers of width 48) trained by
                maximum pseudo-likelihood on the same sentences: the masked LM of mix-and-match.
    task        unprompted generation of a whole sentence whose written sum ends in the digit ``c`` (row ``b``
                asks for ``c = b mod 10``): success is exact. ``met``: the sentence is well formed and its last
                sum digit is ``c``; ``met_and_right``: also the sum is the right one (the constraint met by a
                fluent sentence); ``right``: the sum is right whatever its last digit.
    methods     ``plain``: one draw of the base LM per row (the constraint ignored; chance is 0.1).
                ``mix_and_match``: :class:`~ebms.samplers.MixAndMatch` from the plain draw, energy
                ``E_mlm + alpha * [constraint not met]`` (``E_mlm``: the cloze model's negative pseudo-log-
                likelihood, :class:`~ebms.models.controlled.ClozeFluency`), proposal the cloze model, ``epochs``
                systematic scans of the 9 positions. ``mix_and_match_lm``: the same with the base LM as the
                fluency expert (``-log p_LM + alpha * [not met]``; the proposal is still the cloze model).
                ``cold``: :func:`~ebms.samplers.cold_decode` from the base LM's logits along the plain draw,
                ``E = -f_LM + lambda * soft constraint`` (:class:`~ebms.models.controlled.SoftFluency`,
                :meth:`~ebms.models.controlled.TokenConstraint.soft`), Langevin ``cold_steps`` steps, then
                top-``k`` guided discretisation by the base LM; ``cold_argmax``: the same soft sequences
                discretised by the plain argmax (the monograph's tip 18: it loses fluency).
    figures     per method and seed: the three shares over ``--rows`` rows and the perplexity of the outputs
                under the base LM (``</s>`` included); paired differences of the methods with 95 % Student-t
                intervals (``ebms.metrics.compare_over_seeds``).
    seeds       ``--seeds`` (default 0 .. 4): the models' initialisation and data order, and every draw.

Run: ``python benchmarks/controlled_generation.py [--seeds 0 1 2 3 4] [--dim 32] [--steps 1200] [--record NAME]
[--quick]``; ``--dim 64 --steps 1500`` gives the base LM the sizes and budget of the ``addition-base`` recipe.
"""

from __future__ import annotations

import argparse
import math
import time

import _common as C
import torch
from _record import Recorder

from ebms.data import AdditionTask
from ebms.metrics import compare_over_seeds
from ebms.models.controlled import (
    ClozeFluency,
    LMFluency,
    SoftFluency,
    TokenConstraint,
    allowed_tokens,
    cloze_proposal,
    lm_logits_along,
    lm_next_logits,
)
from ebms.models.lm import TransformerLM
from ebms.nets.two_tower import TwoTowerCloze
from ebms.samplers.cold import cold_decode, guided_discretise, noise_schedule
from ebms.samplers.mix_and_match import MixAndMatch, ProductOfExperts
from ebms.sequences import Sequences

DIGITS, N_TRAIN, ERROR_RATE = 2, 4000, 0.3
SETTINGS = {"digits": DIGITS, "n_train": N_TRAIN, "error_rate": ERROR_RATE, "dim": 32, "layers": 2,
            "cloze_dim": 48, "train_steps": 1200, "batch_size": 64, "lr": 3e-3, "grad_clip": 1.0,
            "alpha": 6.0, "epochs": 10,
            "lam": 3.0, "cold_steps": 100, "cold_step_size": 0.3, "top_k": 3}
METHODS = ("plain", "mix_and_match", "mix_and_match_lm", "cold", "cold_argmax")


def train(model: torch.nn.Module, loss_fn, data: Sequences, steps: int, seed: int) -> float:
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=SETTINGS["lr"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(steps):
        idx = torch.randint(data.batch_size, (SETTINGS["batch_size"],), generator=g)
        loss = loss_fn(data[idx])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), SETTINGS["grad_clip"])
        opt.step()
        sched.step()
    model.eval()
    return float(loss.detach())


def shares(task: AdditionTask, x: Sequences, targets: torch.Tensor) -> dict[str, float]:
    """``met``, ``met_and_right`` and ``right`` of sentences ``x`` against last-digit targets (digit ids)."""
    tok = torch.nn.functional.pad(x.tokens, (0, max(0, task.length - x.tokens.shape[1])))[:, : task.length]
    digit = (tok >= 2) & (tok <= 11)
    layout = digit.clone()
    layout[:, DIGITS], layout[:, 2 * DIGITS + 1] = tok[:, DIGITS] == 12, tok[:, 2 * DIGITS + 1] == 13
    formed = layout.all(1) & (x.lengths == task.length)
    met = formed & (tok[:, -1] == targets)
    right = task.is_correct(x)
    return {"met": float(met.double().mean()), "met_and_right": float((met & right).double().mean()),
            "right": float(right.double().mean())}


def perplexity(lm: TransformerLM, x: Sequences) -> float:
    with torch.no_grad():
        return math.exp(-float(lm.log_prob(x).double().sum()) / float((x.lengths + 1).sum()))


def one_seed(seed: int, rows: int, steps: int) -> dict[str, dict[str, float]]:
    s, task = SETTINGS, AdditionTask(DIGITS)
    torch.manual_seed(seed)
    data = task.sample_ids(N_TRAIN, generator=torch.Generator().manual_seed(1000 + seed), error_rate=ERROR_RATE)
    lm = TransformerLM(task.vocab_size, d_model=s["dim"], num_heads=4, num_layers=s["layers"],
                       dim_feedforward=2 * s["dim"], max_length=task.length + 1)
    cloze = TwoTowerCloze(task.vocab_size, dim=s["cloze_dim"], layers=1, kind="lstm")
    t0 = time.perf_counter()
    lm_loss = train(lm, lambda b: -lm.log_prob(b).mean() / (task.length + 1), data, steps, seed)
    cl_loss = train(cloze, lambda b: ClozeFluency(cloze)(b).mean() / task.length, data, steps, seed + 500)
    C.note(f"seed {seed}: trained LM (loss {lm_loss:.3f}/token) and cloze ({cl_loss:.3f}/token) in "
           f"{time.perf_counter() - t0:.0f} s")
    g = torch.Generator().manual_seed(2000 + seed)
    targets = torch.arange(rows) % 10 + 2
    constraint = TokenConstraint.targets(task.length - 1, targets, task.vocab_size)
    out: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        draw = lm.sample(rows, g, max_length=task.length, truncate=True)
    draw = Sequences(draw.pad_to(task.length).tokens.masked_fill(~draw.pad_to(task.length).mask(), 2),
                     torch.full((rows,), task.length))  # short draws padded with '0's: every chain 9 long
    t = time.perf_counter()
    out["plain"] = {**shares(task, draw, targets), "ppl": perplexity(lm, draw), "wall_s": 0.0}
    t = time.perf_counter()
    energy = ProductOfExperts([ClozeFluency(cloze), constraint], [1.0, s["alpha"]])
    sampler = MixAndMatch(cloze_proposal(cloze))
    x = sampler.sample(energy, draw, steps=s["epochs"] * task.length, generator=g)
    out["mix_and_match"] = {**shares(task, x, targets), "ppl": perplexity(lm, x),
                            "wall_s": round(time.perf_counter() - t, 1)}
    t = time.perf_counter()
    energy_lm = ProductOfExperts([LMFluency(lm), constraint], [1.0, s["alpha"]])
    x_lm = sampler.sample(energy_lm, draw, steps=s["epochs"] * task.length, generator=g)
    out["mix_and_match_lm"] = {**shares(task, x_lm, targets), "ppl": perplexity(lm, x_lm),
                               "wall_s": round(time.perf_counter() - t, 1)}
    t = time.perf_counter()
    fluency = SoftFluency(lm)
    res = cold_decode(lambda y: fluency(y) + s["lam"] * constraint.soft(y), lm_logits_along(lm, draw),
                      step_size=s["cold_step_size"], noise=noise_schedule(s["cold_steps"]),
                      next_logits=lm_next_logits(lm), top_k=s["top_k"],
                      allowed=allowed_tokens(task.vocab_size, [0, 1]), generator=g)
    y = Sequences(res.tokens, torch.full((rows,), task.length))
    out["cold"] = {**shares(task, y, targets), "ppl": perplexity(lm, y), "wall_s": round(time.perf_counter() - t, 1)}
    y_arg = Sequences(guided_discretise(res.logits, allowed=allowed_tokens(task.vocab_size, [0, 1])),
                      torch.full((rows,), task.length))
    out["cold_argmax"] = {**shares(task, y_arg, targets), "ppl": perplexity(lm, y_arg), "wall_s": 0.0}
    for m in METHODS:
        C.note(f"seed {seed} {m}: " + ", ".join(f"{k} {v:.3f}" for k, v in out[m].items()))
    for name, z in (("mix_and_match", x), ("mix_and_match_lm", x_lm), ("cold", y), ("cold_argmax", y_arg)):
        C.note(f"  {name}: " + " ".join(task.decode(z[:10])))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--rows", type=int, default=300)
    p.add_argument("--record", default=None)
    p.add_argument("--quick", action="store_true", help="100 training steps, 40 rows, two seeds, no record")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dim", type=int, default=SETTINGS["dim"], help="the base LM's width (feed-forward: twice it)")
    p.add_argument("--steps", type=int, default=SETTINGS["train_steps"], help="training steps of both models")
    args = p.parse_args(argv)
    SETTINGS["dim"], SETTINGS["train_steps"] = args.dim, args.steps
    steps = SETTINGS["train_steps"]
    if args.quick:
        steps, args.rows, args.seeds, args.record = 100, 40, args.seeds[:2], None
    torch.set_num_threads(args.threads)
    rec = Recorder(args.record, seeds=args.seeds, settings={**SETTINGS, "train_steps": steps, "rows": args.rows}
                   ) if args.record else None
    per: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
    for seed in args.seeds:
        res = one_seed(seed, args.rows, steps)
        for m in METHODS:
            per[m].append(res[m])
    comparisons = {}
    for a, b in (("mix_and_match", "plain"), ("mix_and_match_lm", "plain"), ("cold", "plain"),
                 ("mix_and_match", "cold"), ("cold", "cold_argmax")):
        for metric, higher in (("met", True), ("met_and_right", True), ("right", True), ("ppl", False)):
            cmp = compare_over_seeds([r[metric] for r in per[a]], [r[metric] for r in per[b]], seeds=args.seeds,
                                     name_a=a, name_b=b, metric=metric, higher_is_better=higher)
            comparisons[f"{a}_minus_{b}_{metric}"] = cmp.to_dict()
            print(cmp.sentence())
    rows = [[m, *(f"{sum(r[k] for r in per[m]) / len(per[m]):.3f}" for k in ("met", "met_and_right", "right", "ppl"))]
            for m in METHODS]
    print(C.format_table(["method", "met", "met and right", "right", "perplexity"], rows))
    if rec is not None:
        mean = {m: {k: sum(r[k] for r in per[m]) / len(per[m]) for k in ("met", "met_and_right", "right", "ppl")}
                for m in METHODS}
        rec.write(figures={"per_seed": per, "mean": mean, "comparisons": comparisons},
                  notes="unprompted 2-digit addition sentences whose written sum must end in a given digit; shares "
                        "over rows, perplexity of the outputs under the base LM; differences are a - b per seed.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
