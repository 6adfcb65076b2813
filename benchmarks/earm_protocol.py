"""E-ARM at the paper's protocol, scaled to this CPU: phases in epochs, branch points on one cross-entropy
trajectory, selection on validation, resumable long runs, comparisons over seeds.

Protocol (Wang, Che, Li, Song, Pei, Bengio & Li 2022, *Your autoregressive generative model can be better if
you treat it as an energy-based one*, section 4 and Table 6, scaled):
    trajectory  per task and seed one cross-entropy (CE) run of ``--epochs`` epochs (an epoch: every training
                example once, in a fresh permutation; ``floor(N / 32)`` batches), a checkpoint and the
                validation NLL per token after every epoch. Its objective is ``EARM`` switched off
                (``start_step`` beyond the run): the same teacher-forced cross-entropy the E-ARM arms
                add their surrogate to, and the same state, so a branch restores a CE checkpoint exactly.
    E-ARM arm   ``earm --start-epoch e``: from the CE run's checkpoint of epoch ``e`` (weights, Adam state,
                data position, RNG), the same loss plus ``weight * S`` for the remaining epochs (the paper
                starts E-ARM at epoch 15 of its base models and trains to early stopping). ``weight =
                --weight-scale / K`` (``K`` the mean number of steps of a training example: the surrogate,
                summed over steps, on the CE's per-token scale); the surrogate's own gradient clipped to
                norm ``--clip`` (``EARM(clip=...)``) before it joins the CE's; truncate 2, EMA 0.9 (the
                paper's). Both arms: Adam, constant learning rate, the total gradient norm clipped at 1
                (``--grad-clip``: another bound or ``none``, with a CE run of its own, ``ce-g<clip>``).
    selection   each arm's test figures are those of its checkpoint with the lowest validation NLL among
                the epochs after the branch (``e + 1`` to the end, the CE arm read on the same epochs), as
                the paper keeps its best checkpoint on validation; the last epoch's are recorded too. ``report``
                also compares E-ARM with the CE run at its best epoch overall (the branch epoch and those
                before it included: CE early-stopped on its own), the stricter reference where CE
                overfits before or at the branch.
                Early stopping after 20 epochs without a validation gain (the paper's patience).
    tasks       ``mt``: ``toy_translation_splits(4000, 200, 500, seed=0, synonym_prob=0.2)``,
                ``Seq2SeqTransformer`` (d 64, 4 heads, 2 + 2 layers, ff 128, dropout 0.1, max length 40),
                label smoothing 0.1, batch 32, Adam 3e-3; test: corpus BLEU (sacreBLEU) of greedy and
                beam-5 decoding, beam-5 BLEU by reference length, NLL per target token. ``--pairs N``: the
                first ``N`` training pairs instead (runs under ``mt-n<N>``; the same valid and test sets).
                ``ceiling`` (printed, recorded): the same test figures of the true model (``translate``, exact
                ``target_log_prob``), the best any model can do on average.
                ``lm``: character-level Tiny Shakespeare lines (train/valid/test splits of the library),
                ``LSTMLM`` (embedding 64, hidden 256, 1 layer), batch 32, Adam 2e-3; test perplexity
                per character (``</s>`` counted). ``--lines N``: the first ``N`` training lines instead (runs
                under ``lm-n<N>``; the same valid and test lines), so that the epochs fit one session.
                ``--dropout P``: the LSTM LM with dropout ``P`` on its embeddings and outputs (the default 0
                overfits 10,000 lines within 15 epochs; a regularised CE is the control for E-ARM acting as a
                regulariser; runs under ``...-drop<P>``).
    comparison  E-ARM minus CE per figure, paired by seed (``ebms.metrics.compare_over_seeds``: mean of the
                per-seed differences, 95 % Student-t interval, verdict); the exposure-bias ratio of the
                two selected models (share of gold test tokens the E-ARM model gives more probability).

Runs live in ``runs/earm-protocol/<task>/seed<s>/<arm>`` (ignored by git; every checkpoint kept). Every
command resumes what is there: a run stopped by Ctrl-C, SIGTERM or ``timeout`` continues from its last
checkpoint when the command is given again, so long runs go in the background with a minute budget::

    timeout -s TERM 60m python benchmarks/earm_protocol.py ce --task mt --seeds 0 1 2
    timeout -s TERM 90m python benchmarks/earm_protocol.py earm --task mt --seeds 0 1 2 --start-epoch 15 --clip 0.5
    python benchmarks/earm_protocol.py report --task mt --start-epoch 15 --clip 0.5 --record earm_protocol_mt
    python benchmarks/earm_protocol.py sweep --task mt --clip 0.5 --arms 15:1 15:1:2 5:1 --record earm_protocol_mt_sweep
    python benchmarks/earm_protocol.py ce --task lm --lines 10000 --schedule isqrt --seeds 0 1 2 3 4

``sweep`` tabulates several arms (``START_EPOCH:WEIGHT_SCALE[:CLIP]``) against the same CE runs, each read after its
own branch: the strength and start-epoch sweep (the paper's Table 4 analogue), with each arm's surrogate gradient
norms. While that norm exceeds the clip the weight drops out of the step, so with a binding clip the clip, not the
weight, is the strength to sweep.

``--quick``: 320 training examples (``mt``: 100 validation and 100 test pairs), 4 epochs, E-ARM from epoch 2 (the
same code path in a minute or two; runs under ``runs/earm-protocol-quick``).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as C
import torch
from _record import Recorder
from torch import Tensor, nn

from ebms.data.text import Vocabulary, tiny_shakespeare
from ebms.data.toy_translation import target_log_prob, toy_translation_splits, translate
from ebms.metrics.bleu import bleu_by_length, corpus_bleu
from ebms.metrics.exposure_bias import exposure_bias_ratio
from ebms.metrics.seeds import compare_over_seeds
from ebms.models.lm import LSTMLM
from ebms.models.lm.perplexity import perplexity
from ebms.models.seq2seq import Seq2SeqAdapter, Seq2SeqTransformer
from ebms.objectives.earm import EARM, energy_resample, sequence_energy
from ebms.sequences import Sequences
from ebms.train import Trainer
from ebms.train.callbacks import EarlyStopping, PeriodicEval
from ebms.train.checkpoint import CheckpointStore

ROOT = Path(__file__).resolve().parents[1]
BATCH = 32
NEVER = 10**12  # a start step no run reaches: E-ARM switched off
PATIENCE = 20  # epochs without a validation gain before early stopping (the paper's)
MT_BUCKETS = ((0, 10), (10, 20), (20, None))


@dataclass
class TaskSpec:
    """What the protocol needs of a task: data, a model per seed, its loss settings and its figures."""

    name: str
    data: tuple[Tensor, ...]
    k_mean: float  # mean steps per training example (tokens + </s>)
    max_steps: int  # the most steps a batch can have (EARM's moving-average buffers)
    lr: float
    label_smoothing: float
    build: Callable[[], nn.Module]
    valid: Callable[[nn.Module], dict[str, float]]
    test: Callable[[nn.Module], dict[str, float]]
    exposure: Callable[[nn.Module, nn.Module], Any]
    lower_better: dict[str, bool]
    ceiling: dict[str, float] = field(default_factory=dict)  # the true model's figures, where it is known

    @property
    def steps_per_epoch(self) -> int:
        return self.data[0].shape[0] // BATCH


def _chunks(x: Sequences, size: int) -> list[Sequences]:
    return [x[torch.arange(i, min(i + size, x.batch_size))] for i in range(0, x.batch_size, size)]


SYNONYM_PROB = 0.2
MT_PAIRS = 4000  # training pairs of the ``mt`` task (``--pairs``)


def task_mt(quick: bool, pairs: int = MT_PAIRS) -> TaskSpec:
    # --quick: 100 validation and 100 test pairs (four beam-5 decodes of 500 test pairs made the quick run 6 minutes)
    sp = toy_translation_splits(pairs, 100 if quick else 200, 100 if quick else 500, seed=0, synonym_prob=SYNONYM_PROB)
    src, tgt = sp.train.source, sp.train.target
    if quick:
        src, tgt = src[torch.arange(320)], tgt[torch.arange(320)]
    valid = list(zip(_chunks(sp.valid.source, 250), _chunks(sp.valid.target, 250)))
    tests = list(zip(_chunks(sp.test.source, 250), _chunks(sp.test.target, 250)))
    tt = sp.test.target

    def build() -> nn.Module:
        return Seq2SeqAdapter(Seq2SeqTransformer(len(sp.source_vocab), len(sp.target_vocab), d_model=64, heads=4,
                                                 layers=2, ff=128, dropout=0.1, max_length=40))

    def nll(model: nn.Module, pairs: list[tuple[Sequences, Sequences]]) -> float:
        net = model.model.eval()
        with torch.no_grad():
            lp = sum(float(net.log_prob(s, t).double().sum()) for s, t in pairs)
        model.train()
        return -lp / float(sum(int((t.lengths + 1).sum()) for _, t in pairs))

    def test(model: nn.Module) -> dict[str, float]:
        net = model.model.eval()
        with torch.no_grad():
            greedy = Sequences.cat([net.greedy(s) for s, _ in tests])
            beams = [net.beam_search(s, beam=5) for s, _ in tests]
        beam = Sequences.cat([r.sequences for r in beams])
        out = {"bleu_greedy": corpus_bleu(greedy, tt, vocab=sp.target_vocab),
               "bleu_beam5": corpus_bleu(beam, tt, vocab=sp.target_vocab), "test_nll_per_token": nll(model, tests)}
        for rule in ("joint", "resample"):  # the beam's 5 hypotheses picked by the E-ARM energy (Table 9)
            g = torch.Generator().manual_seed(0)
            picked = Sequences.cat([_energy_pick(model, s, r, rule, g) for (s, _), r in zip(tests, beams)])
            out[f"bleu_beam5_energy_{rule}"] = corpus_bleu(picked, tt, vocab=sp.target_vocab)
        for b in bleu_by_length(beam, tt, MT_BUCKETS, vocab=sp.target_vocab):
            out[f"bleu_beam5_len{b.low}-{b.high or 'inf'}"] = b.bleu
        return out

    lower = {"bleu_greedy": False, "bleu_beam5": False, "test_nll_per_token": True, "bleu_beam5_energy_joint": False,
             "bleu_beam5_energy_resample": False,
             **{f"bleu_beam5_len{lo}-{hi or 'inf'}": False for lo, hi in MT_BUCKETS}}
    return TaskSpec("mt", (src.tokens, src.lengths, tgt.tokens, tgt.lengths), float(tgt.lengths.double().mean()) + 1,
                    41, 3e-3, 0.1, build, lambda m: {"valid_nll": nll(m, valid)}, test,
                    lambda a, b: exposure_bias_ratio(a, b, tests), lower, mt_ceiling(sp.test))


def mt_ceiling(test: Any) -> dict[str, float]:
    """The true model's test figures: BLEU of the canonical translation (the most probable target, which greedy
    and beam search of a perfect model return), overall and per length bucket, and the exact NLL per token of the
    references (``</s>`` counted, as the models' figure). Label smoothing keeps a trained model's NLL above it."""
    sources, refs = test.source_vocab.decode(test.source), test.target_vocab.decode(test.target)
    best = test.target_vocab.encode([translate(s) for s in sources])
    out = {"bleu": corpus_bleu(best, test.target, vocab=test.target_vocab),
           "nll_per_token": -sum(target_log_prob(s, r, SYNONYM_PROB) for s, r in zip(sources, refs))
           / float(int((test.target.lengths + 1).sum()))}
    for b in bleu_by_length(best, test.target, MT_BUCKETS, vocab=test.target_vocab):
        out[f"bleu_len{b.low}-{b.high or 'inf'}"] = b.bleu
    return out


def _energy_pick(model: nn.Module, src: Sequences, beam: Any, rule: str, g: torch.Generator) -> Sequences:
    """One of each source's beam hypotheses, picked by :func:`energy_resample` (empty slots skipped)."""
    k = beam.hypothesis_log_probs.shape[1]
    live = torch.isfinite(beam.hypothesis_log_probs.reshape(-1)).nonzero().squeeze(1)
    sources = src[torch.arange(src.batch_size).repeat_interleave(k)]
    lq, e = sequence_energy(model.eval(), (sources[live], beam.hypotheses[live]))
    log_q, energy = lq.new_full((k * src.batch_size,), -math.inf), e.new_zeros(k * src.batch_size)
    log_q[live], energy[live] = lq, e
    return beam.hypotheses[energy_resample(log_q, energy, k, rule=rule, generator=g)]


def task_lm(quick: bool, lines: int | None = None, dropout: float = 0.0) -> TaskSpec:
    """The character LM; ``lines``: train on the first ``lines`` training lines (the vocabulary is still built
    from all of them, so every run of the task shares one vocabulary and one test set); ``dropout``: the LM's
    dropout (embeddings and outputs, training mode only)."""
    text = {s: tiny_shakespeare(s, form="lines") for s in ("train", "valid", "test")}
    vocab = Vocabulary.build(text["train"], level="char")
    train, valid, test = (vocab.encode(text[s]) for s in ("train", "valid", "test"))
    if lines is not None:
        train = train[torch.arange(min(lines, train.batch_size))]
    if quick:
        train = train[torch.arange(min(320, train.batch_size))]
    vb, tb = _chunks(valid, 256), _chunks(test, 256)

    def build() -> nn.Module:
        return LSTMLM(len(vocab), embedding_dim=64, hidden_size=256, num_layers=1, dropout=dropout)

    def nll(model: nn.Module, batches: list[Sequences]) -> float:
        model.eval()
        ppl = perplexity(model, batches)
        model.train()
        return math.log(ppl.perplexity)

    return TaskSpec("lm", (train.tokens, train.lengths), float(train.lengths.double().mean()) + 1,
                    int(train.lengths.max()) + 1, 2e-3, 0.0, build, lambda m: {"valid_nll": nll(m, vb)},
                    lambda m: {"test_ppl": math.exp(nll(m, tb))},
                    lambda a, b: exposure_bias_ratio(a, b, tb), {"test_ppl": True})


TASKS = {"mt": task_mt, "lm": task_lm}


# --- runs ---------------------------------------------------------------------------------------------------
SCHEDULES = ("constant", "isqrt")
WARMUP_EPOCHS = 4  # the isqrt schedule's linear warm-up


def lr_multiplier(schedule: str, steps_per_epoch: int) -> Callable[[int], float] | None:
    """``None`` for a constant rate; ``isqrt``: linear warm-up over ``WARMUP_EPOCHS`` epochs to the task's rate,
    then ``sqrt(warmup / t)`` (the inverse square root schedule of the fairseq set-ups the paper trains with)."""
    if schedule == "constant":
        return None
    warm = WARMUP_EPOCHS * steps_per_epoch

    def f(t: int) -> float:
        t = max(t, 1)
        return min(t / warm, math.sqrt(warm / t))
    return f


def ce_name(grad_clip: float | None = 1.0, schedule: str = "constant") -> str:
    """The CE run's folder: ``ce`` with the default total clip of 1, else ``ce-g<clip>`` (``ce-gnone``: none);
    ``-isqrt`` after ``ce`` with the inverse square root schedule."""
    name = "ce" + ("" if schedule == "constant" else f"-{schedule}")
    return name if grad_clip == 1.0 else f"{name}-g{'none' if grad_clip is None else f'{grad_clip:g}'}"


def arm_name(start_epoch: int, weight_scale: float, clip: float | None, grad_clip: float | None = 1.0,
             separate: bool = False, schedule: str = "constant") -> str:
    """The arm's folder; ``-sep`` when the CE term keeps the total clip on its own (``separate``)."""
    total = ce_name(grad_clip, schedule)[2:]
    return f"earm-e{start_epoch}-w{weight_scale:g}-c{'none' if clip is None else f'{clip:g}'}{total}" + \
        ("-sep" if separate else "")


def _trainer(spec: TaskSpec, seed: int, run_dir: Path, epochs: int, objective: EARM,
             grad_clip: float | None = 1.0, schedule: str = "constant") -> Trainer:
    torch.manual_seed(seed)  # the model's initial weights (the same in every arm: a branch restores them anyway)
    model = spec.build()
    spe = spec.steps_per_epoch
    callbacks = [PeriodicEval(lambda t: spec.valid(t.model), every=spe),
                 EarlyStopping("eval/valid_nll", patience=PATIENCE)]
    return Trainer(objective, model, spec.data, steps=epochs * spe, batch_size=BATCH, run_dir=run_dir, seed=seed,
                   optimizer=lambda groups: torch.optim.Adam(groups, lr=spec.lr), grad_clip=grad_clip, guard=None,
                   lr_schedule=lr_multiplier(schedule, spe),
                   log_every=max(spe // 5, 1), checkpoint_every=spe, callbacks=callbacks, progress=sys.stderr.isatty(),
                   identity={"bench": "earm_protocol", "task": spec.name, "seed": seed, "epochs": epochs})


def _objective(spec: TaskSpec, start_step: int, weight_scale: float, clip: float | None,
               ce_clip: float | None = None) -> EARM:
    return EARM(weight=weight_scale / spec.k_mean, start_step=start_step, truncate=2, ema=0.9,
                label_smoothing=spec.label_smoothing, max_steps=spec.max_steps, clip=clip, ce_clip=ce_clip)


def _done(t: Trainer, run_dir: Path) -> bool:
    """Whether the run is complete: its newest checkpoint is of the last step or of an early stop."""
    store = CheckpointStore(run_dir / "checkpoints")
    if not store.has_checkpoint():
        return False
    ckpt = store.load()
    return ckpt.step >= t.steps or bool(ckpt.meta["trainer"].get("stop_reason"))


def train_ce(spec: TaskSpec, seed: int, root: Path, epochs: int, grad_clip: float | None = 1.0,
             schedule: str = "constant") -> None:
    run = root / f"seed{seed}" / ce_name(grad_clip, schedule)
    t = _trainer(spec, seed, run, epochs, _objective(spec, NEVER, 1.0, None), grad_clip, schedule)
    if not _done(t, run):
        t.fit(resume="auto")


def train_earm(spec: TaskSpec, seed: int, root: Path, epochs: int, start_epoch: int, weight_scale: float,
               clip: float | None, grad_clip: float | None = 1.0, separate: bool = False,
               schedule: str = "constant") -> bool:
    """Train (or continue) one E-ARM arm; ``False`` when the CE run has not reached the branch epoch yet.

    ``separate``: the CE term's gradient is clipped at ``grad_clip`` inside the objective and the surrogate's
    at ``clip``, with the trainer's total clip off, so the CE step equals the CE run's and the surrogate's is
    added to it (with the shared total clip, a surrogate gradient ~4x the CE's shrinks the CE step).
    """
    ce = root / f"seed{seed}" / ce_name(grad_clip, schedule)
    run = root / f"seed{seed}" / arm_name(start_epoch, weight_scale, clip, grad_clip, separate, schedule)
    start = start_epoch * spec.steps_per_epoch
    objective = _objective(spec, start, weight_scale, clip, grad_clip if separate else None)
    t = _trainer(spec, seed, run, epochs, objective, None if separate else grad_clip, schedule)
    if CheckpointStore(run / "checkpoints").has_checkpoint():
        if not _done(t, run):
            t.fit(resume=True)
        return True
    branch = ce / "checkpoints" / f"ckpt-{start:09d}.json"
    if not branch.is_file():
        print(f"seed {seed}: the CE run has no checkpoint of epoch {start_epoch} yet ({branch}); run `ce` first")
        return False
    run.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ce / "metrics.jsonl", run / "metrics.jsonl")  # the shared history, cut back to the branch
    t.fit(resume=str(branch))
    return True


# --- report -------------------------------------------------------------------------------------------------
def valid_curve(run: Path) -> dict[int, float]:
    """Validation NLL per checkpointed step, from the run's log."""
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("event") == "eval":
            out[int(rec["step"])] = float(rec["values"]["valid_nll"])
    return out


def select(curve: dict[int, float], after: int) -> int:
    """The step with the lowest validation NLL among steps ``> after`` (the earliest on ties)."""
    steps = sorted(s for s in curve if s > after)
    if not steps:
        raise SystemExit(f"no validation figure after step {after}: the run has not trained past its branch yet")
    return min(steps, key=lambda s: (curve[s], s))


def load_model(spec: TaskSpec, run: Path, step: int) -> nn.Module:
    ckpt = CheckpointStore(run / "checkpoints").load(step)
    model = spec.build()
    model.load_state_dict(ckpt.state())
    return model.eval()


def report(spec: TaskSpec, root: Path, seeds: list[int], arm: str, start_epoch: int, ce: str = "ce") -> dict[str, Any]:
    after = start_epoch * spec.steps_per_epoch
    per_seed, pairs = {}, {}
    for seed in seeds:
        rec: dict[str, Any] = {"seed": seed}
        models = {}
        for side, name in (("ce", ce), ("earm", arm)):
            run = root / f"seed{seed}" / name
            curve = valid_curve(run)
            best = select(curve, after)
            last = max(curve)
            models[side] = load_model(spec, run, best)
            rec[f"{side}_best_step"], rec[f"{side}_last_step"] = best, last
            rec[f"{side}_best_valid_nll"] = curve[best]
            rec.update({f"{side}_{k}": v for k, v in spec.test(models[side]).items()})
            if last != best:
                rec.update({f"{side}_last_{k}": v for k, v in spec.test(load_model(spec, run, last)).items()})
            rec[f"{side}_valid_curve"] = {str(s): v for s, v in sorted(curve.items())}
            if side == "ce":  # the stricter reference: CE early-stopped on its own, the branch epoch included
                overall = select(curve, 0)
                rec["ce_overall_best_step"], rec["ce_overall_best_valid_nll"] = overall, curve[overall]
                rec.update({f"ce_overall_{k}": v for k, v in (
                    spec.test(load_model(spec, run, overall)) if overall != best
                    else {k: rec[f"ce_{k}"] for k in spec.lower_better}).items()})
        eb = spec.exposure(models["earm"], models["ce"])
        rec.update(exposure_bias_ratio=eb.ratio, exposure_bias_count=eb.count, exposure_bias_total=eb.total)
        per_seed[f"seed{seed}"] = rec
    recs = list(per_seed.values())
    references = (("ce_", "", "cross-entropy"),  # the protocol's: CE read on the epochs after the branch
                  ("ce_overall_", ", CE at its best epoch overall", "cross-entropy (best epoch overall)"))
    for prefix, suffix, name in references:
        for metric, lower in spec.lower_better.items():
            ce, ea = [r[prefix + metric] for r in recs], [r["earm_" + metric] for r in recs]
            pairs[metric + suffix] = compare_over_seeds(ea, ce, seeds=seeds, name_a="E-ARM", name_b=name,
                                                        metric=metric, higher_is_better=not lower).to_dict()
    return {"per_seed": per_seed, "comparisons": pairs}


def _table(fig: dict[str, Any]) -> str:
    rows = []
    for metric, c in fig["comparisons"].items():
        ce, ea = c["values_b"], c["values_a"]
        interval = f"{c['mean_diff']:+.4g}" + (f" [{c['ci_low']:+.4g}, {c['ci_high']:+.4g}]" if len(ce) > 1 else "")
        rows.append([metric, f"{statistics.mean(ce):.4g}", f"{statistics.mean(ea):.4g}", interval, c["verdict"]])
    return C.format_table(["metric", "ce", "earm", "earm - ce (paired, 95 % CI)", "verdict"], rows)


#: an arm's own clip in ``--arms``: the ``--clip`` of the command
DEFAULT_CLIP = "default"


def parse_arm(text: str) -> tuple[int, float, float | None | str]:
    """``START:WEIGHT[:CLIP]`` (``15:3``: branch at epoch 15, weight 3 / K, the command's ``--clip``; ``15:1:0.3``:
    clip 0.3; ``15:1:none``: unclipped) as ``(start_epoch, weight_scale, clip)``."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        start, weight = int(parts[0]), float(parts[1])
        clip: float | None | str = DEFAULT_CLIP if len(parts) == 2 else (
            None if parts[2] == "none" else float(parts[2]))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START_EPOCH:WEIGHT_SCALE[:CLIP], e.g. 15:3 or 15:1:0.3; got {text!r}"
                                         ) from None
    if weight <= 0 or not math.isfinite(weight):
        raise argparse.ArgumentTypeError(f"the weight scale must be a positive number; got {text!r}")
    if isinstance(clip, float) and (clip <= 0 or not math.isfinite(clip)):
        raise argparse.ArgumentTypeError(f"the clip must be a positive number or 'none'; got {text!r}")
    return start, weight, clip


def sweep(spec: TaskSpec, root: Path, seeds: list[int], arms: list[tuple[int, float, Any]], clip: float | None,
          grad_clip: float | None, separate: bool, schedule: str) -> dict[str, Any]:
    """Every arm of ``arms`` (start epoch, weight scale, clip or ``DEFAULT_CLIP`` for ``clip``) against the CE run,
    through :func:`report` (the Table 4 analogue when the arms differ in their start epoch); arms whose runs are
    missing are listed, not fatal. The per-epoch validation curves are left out (a sweep record stays small)."""
    out: dict[str, Any] = {"arms": {}, "missing": []}
    for start, weight, own in arms:
        arm_clip = clip if own == DEFAULT_CLIP else own
        name = arm_name(start, weight, arm_clip, grad_clip, separate, schedule)
        if not all((root / f"seed{s}" / name / "metrics.jsonl").is_file() for s in seeds):
            out["missing"].append(name)
            continue
        fig = report(spec, root, seeds, name, start, ce_name(grad_clip, schedule))
        for per in fig["per_seed"].values():  # the epoch curves are in the runs and in `report`'s record
            for key in [k for k in per if k.endswith("_valid_curve")]:
                del per[key]
        norms = {f"seed{s}": surrogate_norms(root / f"seed{s}" / name, start * spec.steps_per_epoch, arm_clip)
                 for s in seeds}
        out["arms"][name] = {"start_epoch": start, "weight_scale": weight, "weight": weight / spec.k_mean,
                             "clip": arm_clip, "surrogate_grad_norm": norms, **fig}
    return out


def surrogate_norms(run: Path, after: int, clip: float | None) -> dict[str, float]:
    """The surrogate's gradient norm ``earm_grad_norm`` (weighted, before its clip) over the logged training steps
    after the branch: min, median, max, and the share of steps where ``clip`` bound it (the weight drops out of
    such a step, :class:`~ebms.objectives.EARM`)."""
    norms = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        m = rec.get("metrics")
        if m and rec["step"] > after and m.get("active") == 1.0 and "earm_grad_norm" in m:
            norms.append(float(m["earm_grad_norm"]))
    if not norms:
        return {}
    return {"logged_steps": len(norms), "min": min(norms), "median": statistics.median(norms), "max": max(norms),
            "clip_binding_share": (sum(n > clip for n in norms) / len(norms)) if clip is not None else 0.0}


def _sweep_table(fig: dict[str, Any], metrics: list[str]) -> str:
    rows = []
    for name, a in fig["arms"].items():
        row = [name, str(a["start_epoch"]), f"{a['weight_scale']:g}", str(a["clip"])]
        for m in metrics:
            c = a["comparisons"][m]
            row.append(f"{c['mean_diff']:+.4g}" + (f" [{c['ci_low']:+.4g}, {c['ci_high']:+.4g}]"
                                                  if len(c["values_a"]) > 1 else ""))
        eb = [r["exposure_bias_ratio"] for r in a["per_seed"].values()]
        rows.append([*row, f"{statistics.mean(eb):.3f}"])
    return C.format_table(["arm", "start", "weight x K", "clip", *[f"{m}: earm - ce" for m in metrics], "exposure ratio"],
                          rows)


def _ceiling_line(ceiling: dict[str, float]) -> str:
    return ("the true model (the task's ceiling): " + ", ".join(f"{k} {v:.4g}" for k, v in ceiling.items())) \
        if ceiling else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("ce", "earm", "report", "sweep"))
    p.add_argument("--task", choices=sorted(TASKS), required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=50, help="epochs of every run, warm-up included (default 50)")
    p.add_argument("--start-epoch", type=int, default=15, help="the CE epoch an E-ARM arm branches from (15)")
    p.add_argument("--weight-scale", type=float, default=1.0, help="surrogate weight times K (default 1: 1/K); no effect on a step where --clip binds")
    p.add_argument("--clip", type=float, default=None, help="norm bound of the surrogate's own gradient")
    p.add_argument("--grad-clip", type=lambda v: None if v == "none" else float(v), default=1.0,
                   help="the total gradient clip of both arms (default 1; 'none': off): a CE run of its own")
    p.add_argument("--separate", action="store_true",
                   help="E-ARM arm: the CE term keeps --grad-clip on its own, the surrogate --clip, no total clip")
    p.add_argument("--schedule", choices=SCHEDULES, default="constant",
                   help=f"learning rate of both arms: constant, or isqrt ({WARMUP_EPOCHS} warm-up epochs, then 1/sqrt t)")
    p.add_argument("--quick", action="store_true", help="320 examples, 4 epochs, E-ARM from epoch 2")
    p.add_argument("--pairs", type=int, default=None,
                   help=f"mt: training pairs (default {MT_PAIRS}; the same valid and test sets); runs under mt-n<pairs>")
    p.add_argument("--lines", type=int, default=None,
                   help="lm: training lines (default all 29,242; the same valid and test lines); runs under lm-n<lines>")
    p.add_argument("--dropout", type=float, default=None,
                   help="lm: dropout of the LSTM LM in (0, 1) (default none); runs under lm[-n<lines>]-drop<P>")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs-dir", type=Path, default=ROOT / "runs", help="where the runs live (default runs/)")
    p.add_argument("--record", default=None, help="report, sweep: write benchmarks/records/NAME.json")
    p.add_argument("--arms", type=parse_arm, nargs="+", default=None, metavar="START:WEIGHT",
                   help="sweep: the E-ARM arms to tabulate, each START_EPOCH:WEIGHT_SCALE[:CLIP] (e.g. 15:1 15:1:0.3 5:1)")
    args = p.parse_args(argv)
    if args.quick:
        args.epochs, args.start_epoch = 4, 2
    if not 0 < args.start_epoch < args.epochs:
        raise SystemExit(f"--start-epoch: expected an epoch in [1, {args.epochs - 1}]; got {args.start_epoch}")
    if args.pairs is not None and args.task != "mt":
        raise SystemExit(f"--pairs: sets the training pairs of the mt task; got --task {args.task} (drop --pairs)")
    if args.pairs is not None and not BATCH <= args.pairs <= 100_000:
        raise SystemExit(f"--pairs: expected {BATCH} to 100000 training pairs (at least one batch); got {args.pairs}")
    if args.lines is not None and args.task != "lm":
        raise SystemExit(f"--lines: sets the training lines of the lm task; got --task {args.task} (drop --lines)")
    if args.lines is not None and not BATCH <= args.lines <= 29_242:
        raise SystemExit(f"--lines: expected {BATCH} to 29242 training lines (at least one batch); got {args.lines}")
    if args.dropout is not None and args.task != "lm":
        raise SystemExit(f"--dropout: sets the dropout of the lm task's LSTM; got --task {args.task} (drop --dropout)")
    if args.dropout is not None and not 0 < args.dropout < 1:
        raise SystemExit(f"--dropout: expected a probability in (0, 1); got {args.dropout:g}")
    torch.set_num_threads(args.threads)
    pairs = MT_PAIRS if args.pairs is None else args.pairs
    spec = task_mt(args.quick, pairs) if args.task == "mt" else task_lm(args.quick, args.lines, args.dropout or 0.0)
    task_dir = args.task if pairs == MT_PAIRS or args.task != "mt" else f"mt-n{pairs}"
    if args.lines is not None:
        task_dir = f"lm-n{args.lines}"
    if args.dropout is not None:
        task_dir += f"-drop{args.dropout:g}"
    root = args.runs_dir / ("earm-protocol-quick" if args.quick else "earm-protocol") / task_dir
    if args.separate and args.grad_clip is None:
        raise SystemExit("--separate: clips the CE term at --grad-clip; got --grad-clip none (drop --separate)")
    arm = arm_name(args.start_epoch, args.weight_scale, args.clip, args.grad_clip, args.separate, args.schedule)
    t0 = time.perf_counter()
    if args.command == "ce":
        for seed in args.seeds:
            train_ce(spec, seed, root, args.epochs, args.grad_clip, args.schedule)
    elif args.command == "earm":
        for seed in args.seeds:
            train_earm(spec, seed, root, args.epochs, args.start_epoch, args.weight_scale, args.clip, args.grad_clip,
                       args.separate, args.schedule)
    elif args.command == "sweep":
        if not args.arms:
            raise SystemExit("--arms: sweep needs the arms to tabulate, e.g. --arms 15:1 15:3 5:1")
        bad = [f"{s}:{w:g}" for s, w, _ in args.arms if not 0 < s < args.epochs]
        if bad:
            raise SystemExit(f"--arms: start epochs must lie in [1, {args.epochs - 1}]; got {' '.join(bad)}")
        rec = Recorder(args.record, seeds=args.seeds, settings={  # made first: its wall time covers the evaluation
            "task": task_dir, "pairs": pairs if args.task == "mt" else None, "lines": args.lines, "dropout": args.dropout,
            "epochs": args.epochs,
            "arms": [":".join(map(str, a)) for a in args.arms],
            "clip": args.clip, "grad_clip": args.grad_clip, "separate": args.separate, "schedule": args.schedule,
            "warmup_epochs": WARMUP_EPOCHS, "batch": BATCH, "lr": spec.lr, "k_mean": spec.k_mean,
            "steps_per_epoch": spec.steps_per_epoch, "patience_epochs": PATIENCE, "quick": args.quick}) \
            if args.record else None
        fig = sweep(spec, root, args.seeds, args.arms, args.clip, args.grad_clip, args.separate, args.schedule)
        fig["ceiling"] = spec.ceiling
        if not fig["arms"]:
            raise SystemExit(f"--arms: no arm has runs for seeds {args.seeds} under {root} (missing: "
                             f"{', '.join(fig['missing'])}); train them with `earm` first")
        print(_sweep_table(fig, list(spec.lower_better)[:3]))
        print(_ceiling_line(spec.ceiling))
        if fig["missing"]:
            print(f"left out (runs missing for some seed): {', '.join(fig['missing'])}")
        if rec is not None:
            rec.write(figures=fig, notes="Each E-ARM arm (start epoch, weight = scale / K) against the CE run of the "
                                         "same seed, each at its best validation epoch after that arm's branch; "
                                         "comparisons: E-ARM minus CE, paired by seed (one seed: no interval).")
    else:
        rec = Recorder(args.record, seeds=args.seeds, settings={
            "task": task_dir, "pairs": pairs if args.task == "mt" else None, "lines": args.lines, "dropout": args.dropout,
            "epochs": args.epochs,
            "start_epoch": args.start_epoch, "arm": arm,
            "weight": args.weight_scale / spec.k_mean, "clip": args.clip, "grad_clip": args.grad_clip,
            "separate": args.separate, "schedule": args.schedule, "warmup_epochs": WARMUP_EPOCHS,
            "batch": BATCH, "lr": spec.lr,
            "steps_per_epoch": spec.steps_per_epoch, "patience_epochs": PATIENCE, "quick": args.quick}) \
            if args.record else None
        fig = report(spec, root, args.seeds, arm, args.start_epoch, ce_name(args.grad_clip, args.schedule))
        fig["ceiling"] = spec.ceiling
        print(_table(fig))
        print(_ceiling_line(spec.ceiling))
        if rec is not None:
            rec.write(figures=fig, notes="E-ARM arm against the CE run of the same seed, each at its best validation "
                                         "epoch after the branch; comparisons: E-ARM minus CE, paired by seed, 95 % "
                                         "Student-t interval. Training wall time is in each run's metrics.jsonl.")
    print(f"{args.command} done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
