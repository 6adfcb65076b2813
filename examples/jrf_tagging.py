"""Semi-supervised tagging with a joint random field: the supervised CRF against the JRF, same network.

Run:  python examples/jrf_tagging.py [--out OUT] [--labelled 20] [--steps 300] [--seed 0]
      [--seeds 0,1,2,3,4 --record NAME]
      (about 15 seconds per seed on one CPU core; writes OUT/jrf_tagging_curves.png, default
      runs/examples, which git ignores)

* Data: ``ebms.data.lag_copy_tagging`` (three tag classes; 30 % of the words copy the class of the
  word before them, so the tag depends on the context), 600 training and 300 test sentences of 3 to
  8 words. The first ``--labelled`` training sentences keep their tags; the rest keep their words.
* Both methods: ``JRF.from_corpus`` (embedding 16, BiLSTM 16 per direction) from the same seed,
  Adam 1e-2 (``log_z``: 0.05), ``--steps`` steps, gradients clipped at 5.
  *supervised*: ``JRFObjective(None, alpha=0)``, the CRF likelihood on 16 labelled sentences a step.
  *JRF*: the same plus ``alpha = 1`` x DNCE on 16 unlabelled sentences a step, against an
  ``LSTMLM`` noise pre-trained 100 steps on the unlabelled text (``pretrain_noise_lm``), with
  ``zeta`` started by ``init_log_z``.
* Figure: test token accuracy (Viterbi) every ``--steps // 10`` steps, both methods on one plot.
* ``--seeds`` repeats the comparison for several seeds (data, network and batches all drawn from the
  seed; the plot shows the first); ``--record NAME`` writes ``benchmarks/records/NAME.json``
  (``benchmarks/_record.py``): the final accuracies per seed and, with two seeds or more, JRF against
  the supervised CRF by ``ebms.metrics.compare_over_seeds`` (paired by seed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from ebms.data import lag_copy_tagging
from ebms.fit import init_log_z, pretrain_noise_lm
from ebms.models import JRF
from ebms.models.lm import LSTMLM
from ebms.objectives import JRFObjective
from ebms.sequences import Sequences
from ebms.viz import new_figure, save_figure


def accuracy(model: JRF, words: torch.Tensor, tags: torch.Tensor, lengths: torch.Tensor) -> float:
    model.eval()
    pred = model.decode(Sequences(words, lengths))  # -1 beyond each length
    model.train()
    inside = pred >= 0
    return float((pred == tags)[inside].float().mean())


def run(args: argparse.Namespace, seed: int) -> dict[str, list[tuple[int, float]]]:
    """Both methods on the data of ``seed``: their test-accuracy curves."""
    data = lag_copy_tagging(n_train=600, n_test=300, n_tags=3, lag=1, min_length=3, max_length=8, seed=seed)
    words, tags, lengths = data.train
    test = data.test
    n_lab = args.labelled
    unlabelled = Sequences(words[n_lab:], lengths[n_lab:])
    every = max(1, args.steps // 10)
    curves: dict[str, list[tuple[int, float]]] = {}
    for method in ("supervised", "JRF"):
        torch.manual_seed(seed)
        jrf = JRF.from_corpus(Sequences(words, lengths), data.vocab_size, data.n_tags, smoothing=0.5, embed=16,
                              hidden=16)
        if method == "JRF":
            noise = LSTMLM(data.vocab_size, embedding_dim=16, hidden_size=16, num_layers=1)
            pretrain_noise_lm(noise, unlabelled, steps=args.noise_steps, batch_size=32, lr=1e-2,
                              generator=torch.Generator().manual_seed(seed))
            init_log_z(jrf, noise, unlabelled)
            objective = JRFObjective(noise, alpha=1.0, sample_options={"max_length": jrf.max_length + 1,
                                                                       "truncate": True})
        else:
            objective = JRFObjective(None, alpha=0.0)
        theta = [p for n, p in jrf.named_parameters() if n != "log_z"]
        opt = torch.optim.Adam([{"params": theta, "lr": 1e-2}, {"params": [jrf.log_z], "lr": 0.05},
                                {"params": list(objective.parameters()), "lr": 1e-2}])
        g = torch.Generator().manual_seed(seed)
        curve = [(0, accuracy(jrf, *test))]
        for step in range(1, args.steps + 1):
            i = torch.randint(n_lab, (16,), generator=g)
            if method == "JRF":  # 16 labelled rows, then 16 unlabelled rows (tags -1)
                j = n_lab + torch.randint(words.shape[0] - n_lab, (16,), generator=g)
                rows = torch.cat([i, j])
                batch = (words[rows], torch.cat([tags[i], torch.full_like(tags[j], -1)]), lengths[rows])
            else:
                batch = (words[i], tags[i], lengths[i])
            out = objective(jrf, batch, generator=g)
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(theta, 5.0)
            opt.step()
            if step % every == 0 or step == args.steps:
                curve.append((step, accuracy(jrf, *test)))
        curves[method] = curve
        print(f"seed {seed} {method:>10}: test token accuracy {curve[-1][1]:.3f} after {args.steps} steps "
              f"({n_lab} labelled, {words.shape[0] - n_lab} unlabelled sentences)")
    return curves


def write_record(args: argparse.Namespace, recorder: object, runs: dict[int, dict[str, list]]) -> None:
    """The final accuracies per seed and, over two seeds or more, JRF against the supervised CRF."""
    from ebms.metrics.seeds import compare_over_seeds

    seeds = list(runs)
    final = {m: [runs[s][m][-1][1] for s in seeds] for m in ("supervised", "JRF")}
    figures = {"per_seed": {f"seed{s}": {m: runs[s][m][-1][1] for m in final} for s in seeds},
               "means": {m: sum(v) / len(v) for m, v in final.items()},
               "jrf_vs_supervised": compare_over_seeds(final["JRF"], final["supervised"], seeds=seeds, name_a="JRF",
                                                       name_b="supervised CRF", metric="test token accuracy",
                                                       higher_is_better=True).to_dict()}
    recorder.write(figures, notes="Test token accuracy (Viterbi, 300 test sentences) after the last step, per seed "  # type: ignore[attr-defined]
                   "(the seed draws the data, the network and the batches); jrf_vs_supervised: "
                   "ebms.metrics.compare_over_seeds, paired by seed, 95 % Student-t interval.")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/examples"))
    p.add_argument("--labelled", type=int, default=20, help="training sentences that keep their tags")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--noise-steps", type=int, default=100, help="likelihood steps of the noise LM first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default: --seed); the plot shows the first")
    p.add_argument("--record", default=None, help="write benchmarks/records/NAME.json (run from the repository)")
    args = p.parse_args()
    try:
        seeds = [int(v) for v in args.seeds.split(",") if v.strip()] if args.seeds else [args.seed]
    except ValueError:
        p.error(f"--seeds: expected comma-separated integers; got {args.seeds!r}")
    if not seeds or len(set(seeds)) != len(seeds):
        p.error(f"--seeds: expected distinct seeds; got {args.seeds!r}")
    recorder = None
    if args.record:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
        from _record import Recorder

        recorder = Recorder(args.record, seeds=seeds, settings={"labelled": args.labelled, "steps": args.steps,
                                                                "noise_steps": args.noise_steps,
                                                                "threads": torch.get_num_threads()})
    t_start = time.perf_counter()
    runs = {seed: run(args, seed) for seed in seeds}
    curves = runs[seeds[0]]
    fig = new_figure((5.5, 3.5))
    ax = fig.add_subplot()
    for method, curve in curves.items():
        ax.plot([s for s, _ in curve], [a for _, a in curve], marker="o", ms=3, label=method)
    ax.set_xlabel("step")
    ax.set_ylabel("test token accuracy")
    ax.set_title(f"lag-copy tagging, {args.labelled} labelled sentences")
    ax.legend()
    path = save_figure(fig, args.out / "jrf_tagging_curves.png")
    print(f"wrote {path} ({time.perf_counter() - t_start:.0f} s)")
    if recorder is not None:
        write_record(args, recorder, runs)


if __name__ == "__main__":
    main()
