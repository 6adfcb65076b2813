"""Neural TRF (NCE / DNCE) vs an LSTM LM on PTB at an equal wall-clock training budget.

Workload (identical data and budget for every model):
    data        Penn Treebank, Mikolov's splits (``ebms.data.text.ptb``; 42,068 / 3,370 / 3,761 training /
                valid / test sentences); the vocabulary is the training words (``Vocabulary.build``: 10,000
                ids, ``</s>`` and ``<unk>`` included), as in ``benchmarks/ngram.py``.
    batches     32 training sentences of similar length (the sentences sorted by length, a batch is a
                cyclic window from a uniformly drawn start, cut to its longest sentence), one stream per model
                from the same seed.
    budget      every model trains for ``--budget`` wall seconds (default 480; the same ``--threads``,
                default 1) counted from the start of its first optimizer step to the end of the step that
                crosses the budget; building a fixed noise LM is inside the budget. Steps done, steps/s and
                process CPU seconds are reported (CPU < wall means the process was descheduled by other
                work on the machine).
    models      ``lstm``: ``LSTMLM`` 2 x 256, tied embeddings, dropout 0.3 (the ``lstm-ptb`` recipe), Adam
                lr 2e-3, gradient norm clipped at 1, objective ``AutoregressiveNLL``.
                ``nce``: ``TRF`` with a ``Hidden2Scalar.bilstm`` energy (embedding 256, BiLSTM 256 units, one
                layer; the ``trf-nce-ptb`` recipe), ``TRFNCE`` with nu = 1 against a FIXED noise: the KN
                bigram (``BackoffNGram`` order 2, modified KN) of the training sentences, whose ancestral
                sampling is vectorised over the draws (record ``noise_sampling``). With ``--noise-mix EPS``
                the noise is ``MixtureLM([KN bigram, unigram], [1 - EPS, EPS])``, the unigram an add-1
                ``BackoffNGram`` of order 1 (every token sequence, geometric lengths): NCE then also sees
                random-looking sentences, where the KN bigram puts almost no mass (``--mix-component uniform``:
                uniform words instead, with the unigram's ``</s>`` probability, so the same length law).
                ``dnce``: the same TRF trained by ``DynamicNCE`` (nu = 1, alpha = 0.5) with a noise
                ``LSTMLM`` 1 x 200 trained jointly, its output bias set to the training unigram (as
                ``ebms train`` does), draws cut at L + 1 tokens. Both TRFs: Adam lr 1e-3 for the network
                (and the noise), lr 1e-2 for zeta (``--zeta-lr``; Adam moves each of them by about lr per
                step), clipping at 1; lengths 1..L with L = the longest sentence of any split plus 10 (so
                n-best hypotheses with insertions fit), pi = training length frequencies plus one.
    quality     LSTM: exact test perplexity ``exp(-sum log p / (words + sentences))``. TRF: test perplexity
                with the training zeta, and with log Z_l re-estimated for EVERY length 1..L by importance
                sampling (``importance_log_z_per_length``, ``--logz-samples`` draws per length, default 40) from the
                proposal ``LengthConditionalLM(lstm)`` (the trained LSTM above with ``</s>`` masked), via
                ``trf_perplexity``: delta-method stderr and 95 % interval, and the lengths with ESS < 10.
                DNCE's zeta settles at log Z_l + log pi_l - log pi_int,l, not at log Z_l: only its
                re-estimated figure is a perplexity. The median per-length ESS is recorded: when it is near 1
                the re-estimated log Z_l are biased low (so is that perplexity) and the stderr is meaningless.
    memory      the process's peak resident memory (``ru_maxrss``) after each model.

``--proposal FILE``: load the re-estimation proposal from an ``lstm.pt`` written by ``--save`` instead of
training the LSTM (its record is copied), so that runs that differ only in the TRF share one proposal. It is
loaded after the TRFs have trained, so the LSTM may still be training in another process on the other core
(``--models lstm --save DIR`` there, ``--models dnce --proposal DIR/lstm.pt`` here: equal budgets, one core
each): a missing file is waited for (up to ``--proposal-wait`` seconds, default 0: fail at once).
``save_model`` writes through a temporary file, so a waiting reader never sees half a file.
``--noise-classes C``: the DNCE noise is a ``ClassFactoredLSTMLM`` (1 x 200, ``C`` exchange classes of the
training words, fitted inside the budget; class and within-class biases set to the training unigram) instead
of the ``LSTMLM``;
the record and folder get ``_cf<C>``. ``--noise-mix`` (also ``--noise-mix 0``) writes ``neural_trf_lstm_mix<EPS>[_uniform].json`` and saves to
``..._mix<EPS>[_uniform]`` instead of the default record and folder. ``--max-steps N`` also stops each TRF after
``N`` steps, so that runs on a loaded machine compare at equal steps.

``--quick``: 5 s budgets, 2 draws per length, the first 300 test sentences: the same code path, under a
minute on an idle machine. ``--save DIR`` (default ``runs/benchmarks/neural_trf_lstm``, ``..._quick`` with
``--quick``) writes ``lstm.pt``, ``nce.pt``, ``dnce.pt`` (state dicts, settings, re-estimated log Z_l) for
``benchmarks/rescoring_lms.py --models DIR``; ``--no-save`` writes neither the models nor the JSON. Run:
``python benchmarks/neural_trf_lstm.py [--quick] [--budget S] [--logz-samples N] [--models lstm,nce,dnce]
[--zeta-lr LR] [--noise-mix EPS] [--mix-component unigram|uniform] [--proposal FILE] [--max-steps N]
[--threads N]``.
"""

from __future__ import annotations

import argparse
import math
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as C
import _speed_record as SR
import torch
from torch import nn

from ebms.data.text import Vocabulary, ptb, sentence_batches
from ebms.distributions import BackoffNGram
from ebms.distributions.mixture_lm import MixtureLM
from ebms.estimators import importance_log_z_per_length
from ebms.estimators.sequence_log_z import LengthConditionalLM
from ebms.metrics import trf_perplexity
from ebms.models.lm import LSTMLM, ClassFactoredLSTMLM, perplexity
from ebms.models.trf import TRF, Hidden2Scalar, WordClasses
from ebms.objectives import AutoregressiveNLL
from ebms.objectives.trf_nce import TRFNCE, DynamicNCE
from ebms.sequences import Sequences

BENCH = "neural_trf_lstm"
DEFAULT_SAVE = Path("runs/benchmarks/neural_trf_lstm")
KINDS = ("lstm", "nce", "dnce")
BATCH = 32
LENGTH_MARGIN = 10
LSTM_CFG = {"embedding_dim": 256, "hidden_size": 256, "num_layers": 2, "dropout": 0.3, "tie_weights": True}
TRF_CFG = {"embedding_dim": 256, "hidden": 256, "layers": 1}
NOISE_HIDDEN = 200


def _json_safe(obj: Any) -> Any:
    """``obj`` with non-finite floats as ``None`` and paths, tuples and other values as plain JSON."""
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return _json_safe(obj.tolist())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    return str(obj)


def commit_record(rec: Any, args: argparse.Namespace, record: dict[str, Any], *, name: str, notes: str) -> None:
    """Write the committed record ``benchmarks/records/<name>.json`` of a full run (``_speed_record``:
    none for ``--quick`` or ``--no-save``). Non-finite numbers become ``None`` (the notes say so); a
    record above the size limit keeps its ``summary`` and top-level numbers only, the rest stays in
    ``benchmarks/results/``."""
    rec.name = name
    clean = _json_safe(record)
    notes += " Non-finite figures (an infinite perplexity, a missing stderr) are written as null."
    try:
        SR.finish(rec, args, clean, notes=notes)
    except ValueError as e:
        C.note(f"[{name}] {e}: the committed record keeps the summary only")
        small = {k: v for k, v in clean.items() if k == "summary" or not isinstance(v, (dict, list))}
        SR.finish(rec, args, small, notes=notes + " Summary only: the full figures are in benchmarks/results/.")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", type=float, default=None, help="training wall seconds per model (default 480; 5 quick)")
    p.add_argument("--models", default=",".join(KINDS), help="comma list of lstm, nce, dnce (lstm is always trained: "
                                                            "it is the proposal of the log Z re-estimation)")
    p.add_argument("--logz-samples", type=int, default=None, help="importance draws per length (default 40; 2 quick)")
    p.add_argument("--test-sentences", type=int, default=None, help="first N test sentences (default all; 300 quick)")
    p.add_argument("--zeta-lr", type=float, default=1e-2, help="Adam learning rate of the TRFs' zeta (default 1e-2)")
    p.add_argument("--noise-mix", type=float, default=None, help="weight EPS in [0, 1) of a unigram component in "
                                                                  "the NCE noise (default: none, the KN bigram alone)")
    p.add_argument("--mix-component", choices=("unigram", "uniform"), default="unigram",
                   help="the component that --noise-mix weights: the add-1 unigram or uniform words (same lengths)")
    p.add_argument("--proposal", type=Path, default=None, help="lstm.pt to load as the re-estimation proposal "
                                                               "instead of training the LSTM")
    p.add_argument("--proposal-wait", type=float, default=0.0,
                   help="seconds to wait, after the TRFs have trained, for a --proposal file that another process "
                        "is still writing (default 0: it must exist at the start)")
    p.add_argument("--max-steps", type=int, default=None, help="also stop each TRF after this many steps (runs "
                                                                "that differ in the noise then compare at equal steps)")
    p.add_argument("--noise-classes", type=int, default=0, help="DNCE noise: a ClassFactoredLSTMLM over this many "
                                                                 "exchange classes (default 0: the LSTMLM)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", type=Path, default=None, help=f"folder for the trained models (default {DEFAULT_SAVE}, "
                                                           f"with --quick {DEFAULT_SAVE}_quick)")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@dataclass
class PTBData:
    vocab: Vocabulary
    train: Sequences
    valid: Sequences
    test: Sequences
    max_length: int


def load_ptb() -> PTBData:
    """PTB encoded with the training vocabulary; ``max_length`` = longest sentence of any split + margin."""
    train_words = ptb("train")
    vocab = Vocabulary.build(train_words)
    train, valid, test = vocab.encode(train_words), vocab.encode(ptb("valid")), vocab.encode(ptb("test"))
    longest = max(int(x.lengths.max()) for x in (train, valid, test))
    return PTBData(vocab, train, valid, test, longest + LENGTH_MARGIN)


def length_windows(x: Sequences, seed: int) -> Callable[[torch.Generator], Sequences]:
    """Batches of ``BATCH`` sentences of similar length (module docstring)."""
    order = torch.randperm(x.batch_size, generator=torch.Generator().manual_seed(seed))
    order = order[torch.argsort(x.lengths[order], stable=True)]
    tokens, lengths, n = x.tokens[order], x.lengths[order], x.batch_size

    def draw(g: torch.Generator) -> Sequences:
        rows = (int(torch.randint(n, (1,), generator=g)) + torch.arange(BATCH)) % n
        return Sequences(tokens[rows, : int(lengths[rows].max())], lengths[rows], validate=False)

    return draw


def run_for(budget: float, step: Callable[[], dict[str, float]], name: str, t0: float | None = None, *,
            max_steps: int | None = None) -> dict[str, Any]:
    """Call ``step`` until ``budget`` wall seconds (from ``t0``) are spent or ``max_steps`` steps are done; steps,
    rates and last metrics."""
    t0 = time.perf_counter() if t0 is None else t0
    c0, steps, tail, marks = time.process_time(), 0, [], []
    next_mark = budget / 5
    while time.perf_counter() - t0 < budget and (max_steps is None or steps < max_steps):
        m = step()
        steps += 1
        tail = (tail + [m])[-50:]
        if time.perf_counter() - t0 >= next_mark:
            avg = {k: sum(d[k] for d in tail) / len(tail) for k in tail[0]}
            marks.append({"seconds": round(time.perf_counter() - t0, 1), "steps": steps, **avg})
            C.note(f"[{BENCH}] {name}: {time.perf_counter() - t0:.0f} s, {steps} steps, "
                   + ", ".join(f"{k} {v:.4g}" for k, v in avg.items()))
            next_mark += budget / 5
    wall = time.perf_counter() - t0
    last = {k: sum(d[k] for d in tail) / len(tail) for k in tail[0]} if tail else {}
    return {"budget_s": budget, "wall_s": wall, "cpu_s": time.process_time() - c0, "steps": steps,
            "steps_per_s": steps / wall, "sentences_seen": steps * BATCH, "last50": last, "trace": marks}


def new_lstm(V: int) -> LSTMLM:
    return LSTMLM(V, **LSTM_CFG)


def new_trf(data: PTBData) -> TRF:
    V = len(data.vocab)
    energy = Hidden2Scalar.bilstm(V, TRF_CFG["embedding_dim"], TRF_CFG["hidden"], layers=TRF_CFG["layers"])
    return TRF.from_corpus(energy, data.train, V, max_length=data.max_length, smoothing=1.0)


def train_lstm(data: PTBData, budget: float, seed: int) -> tuple[LSTMLM, dict[str, Any]]:
    torch.manual_seed(seed)
    lm = new_lstm(len(data.vocab)).train()
    opt = torch.optim.Adam(lm.parameters(), lr=2e-3)
    objective, draw, g = AutoregressiveNLL(), length_windows(data.train, seed), torch.Generator().manual_seed(seed)

    def step() -> dict[str, float]:
        out = objective(lm, draw(g))
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
        opt.step()
        return {"ppl": float(out.metrics["ppl"])}

    rec = run_for(budget, step, "lstm")
    return lm.eval(), rec


def train_trf(data: PTBData, kind: str, budget: float, seed: int, *, zeta_lr: float = 1e-2,
              noise_mix: float = 0.0, mix_component: str = "unigram", max_steps: int | None = None,
              noise_classes: int = 0) -> tuple[TRF, dict[str, Any]]:
    """A TRF by NCE (fixed KN bigram noise, mixed with a unigram of weight ``noise_mix`` when > 0) or DNCE
    (joint LSTM noise) for ``budget`` wall seconds."""
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    V, L = len(data.vocab), data.max_length
    trf = new_trf(data).train()
    objective: TRFNCE
    if kind == "nce":
        bigram = BackoffNGram.fit(data.train, V, order=2)
        if noise_mix > 0:
            other = BackoffNGram.fit(data.train, V, order=1, smoothing="add_k")
            if mix_component == "uniform":  # words uniform, </s> as likely as under the unigram
                end = other.log_probs_1[0]
                words = (1.0 - end.exp()).log() - math.log(V - 1)
                other = BackoffNGram(V, [torch.arange(V).unsqueeze(1)],
                                     [torch.cat([end.reshape(1), words.expand(V - 1)])])
            objective = TRFNCE(MixtureLM([bigram, other], [1.0 - noise_mix, noise_mix]), nu=1.0)
            label = "add-1 unigram" if mix_component == "unigram" else "uniform words"
            noise = f"MixtureLM(KN bigram, {label}), weights [{1.0 - noise_mix:g}, {noise_mix:g}] (fixed)"
        else:
            objective = TRFNCE(bigram, nu=1.0)
            noise = "KN bigram (BackoffNGram order 2, fixed)"
    else:
        counts = torch.bincount(data.train.tokens[data.train.mask()], minlength=V).double() + 1.0
        counts[0] = data.train.batch_size + 1.0
        lstm: nn.Module
        if noise_classes:  # class-factored softmax: O(C + |c|) per token to draw and score
            classes = WordClasses.fit(data.train, V, noise_classes).classes
            lstm = ClassFactoredLSTMLM(classes, num_classes=noise_classes, embedding_dim=NOISE_HIDDEN,
                                       hidden_size=NOISE_HIDDEN, num_layers=1)
            lstm.init_unigram(counts)
            noise = (f"ClassFactoredLSTMLM 1 x {NOISE_HIDDEN}, {noise_classes} exchange classes, trained jointly "
                     "(DNCE, alpha 0.5)")
        else:
            lstm = LSTMLM(V, embedding_dim=NOISE_HIDDEN, hidden_size=NOISE_HIDDEN, num_layers=1)
            with torch.no_grad():
                lstm.decoder.bias.copy_((counts / counts.sum()).log())
            noise = f"LSTMLM 1 x {NOISE_HIDDEN} trained jointly (DNCE, alpha 0.5)"
        objective = DynamicNCE(lstm, nu=1.0, alpha=0.5, sample_options={"max_length": L + 1, "truncate": True})
    zeta = [trf.log_z]
    others = [p for n, p in trf.named_parameters() if n != "log_z"] + list(objective.parameters())
    opt = torch.optim.Adam([{"params": others, "lr": 1e-3}, {"params": zeta, "lr": zeta_lr}])
    params = others + zeta
    draw, g = length_windows(data.train, seed), torch.Generator().manual_seed(seed)

    def step() -> dict[str, float]:
        out = objective(trf, draw(g), generator=g)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        keys = ("loss", "accuracy", "gap", "noise_outside", "noise_ppl")
        return {k: float(out.metrics[k]) for k in keys if k in out.metrics}

    rec = run_for(budget, step, kind, t0, max_steps=max_steps)
    rec["noise"] = noise
    return trf.eval(), rec


class FixedZeta(nn.Module):
    """A TRF scored with given normalisers: ``log p(x) = log pi_l - E(x) - log_z[l - 1]`` (``log_prob -> (B,)``).

    Lengths outside ``1..L`` get ``outside`` (a finite floor, so that n-best rescoring ranks them last).
    """

    def __init__(self, trf: TRF, log_z: torch.Tensor, *, outside: float = -1e4) -> None:
        super().__init__()
        self.trf, self.log_z, self.outside = trf, log_z.double(), outside

    @torch.no_grad()
    def log_prob(self, x: Sequences) -> torch.Tensor:
        ok = (x.lengths >= 1) & (x.lengths <= self.trf.max_length)
        out = torch.full((x.batch_size,), self.outside, dtype=torch.float64)
        idx = ok.nonzero().squeeze(1)
        if idx.numel():
            y = x[idx]
            y = Sequences(y.tokens[:, : int(y.lengths.max())], y.lengths, validate=False)
            li = y.lengths - 1
            out[idx] = self.trf.log_pi[li].double() - self.trf.energy(y).double() - self.log_z[li]
        return out


def reestimate(trf: TRF, lm: LSTMLM, n: int, seed: int) -> Any:
    """log Z_l for every length 1..L by importance sampling from ``LengthConditionalLM(lm)``."""
    g = torch.Generator().manual_seed(seed + 17)
    with torch.no_grad():
        return importance_log_z_per_length(trf, LengthConditionalLM(lm.eval()), n, generator=g, batch_size=128)


def _row(r: Any) -> dict[str, Any]:
    iv = r.interval()
    return {"perplexity": r.perplexity, "stderr": r.stderr, "interval95": None if iv is None else list(iv),
            "log_stderr_bound": r.log_stderr_bound}


def evaluate_trf(trf: TRF, test: Sequences, est: Any) -> dict[str, Any]:
    res = trf_perplexity(trf, sentence_batches(test, 64, shuffle=False), log_z=est)
    zeta = trf.log_normalisers().detach().double()
    re = est.as_log_z(trf.max_length)
    used = sorted(set(test.lengths.tolist()))
    diff = (zeta - re)[torch.tensor(used) - 1]
    ess = torch.tensor([e.ess or 0.0 for e in est.estimates])
    return {"ess_min": float(ess.min()), "training_zeta": _row(res.training), "reestimated": _row(res.reestimated),
            "low_ess_lengths": list(res.low_ess_lengths), "zeta_minus_logz_mean": float(diff.mean()),
            "zeta_minus_logz_range": [float(diff.min()), float(diff.max())],
            "ess_median": float(torch.tensor([e.ess or 0.0 for e in est.estimates]).median())}


def save_model(folder: Path, kind: str, model: nn.Module, extra: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}.pt"
    part = path.with_name(path.name + ".part")
    torch.save({"kind": kind, "state_dict": model.state_dict(), **extra}, part)
    part.replace(path)  # atomic: a process waiting for the file (--proposal) sees all of it or nothing
    return path


def load_models(folder: Path, data: PTBData) -> dict[str, Any]:
    """What :func:`save_model` wrote: ``{"lstm": LSTMLM, "nce"/"dnce": (TRF, log_z (L,), record)}``."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        path = folder / f"{kind}.pt"
        if not path.exists():
            continue
        blob = torch.load(path, weights_only=False)
        if blob["vocab_size"] != len(data.vocab):
            raise ValueError(f"{path}: vocab_size {blob['vocab_size']} != {len(data.vocab)}")
        model = new_lstm(len(data.vocab)) if kind == "lstm" else new_trf(data)
        model.load_state_dict(blob["state_dict"])
        out[kind] = model.eval() if kind == "lstm" else (model.eval(), blob["reestimated_log_z"], blob["record"])
    return out


def missing_proposal(path: Path, wait: float) -> str:
    """The one-line error for a ``--proposal`` file that is not there (after ``wait`` seconds)."""
    return (f"--proposal: {path} does not exist" + (f" (waited {wait:.0f} s)" if wait > 0 else "")
            + "; write it with python benchmarks/neural_trf_lstm.py --models lstm --save DIR"
            + ("" if wait > 0 else " (or add --proposal-wait SECONDS while that run is still going)"))


def load_proposal(path: Path, data: PTBData, wait: float = 0.0) -> tuple[LSTMLM, dict[str, Any]]:
    """The LSTM and its record from an ``lstm.pt`` written by :func:`save_model`; a missing file is waited for
    up to ``wait`` seconds (another process may be training it)."""
    deadline = time.monotonic() + wait
    if not path.exists() and wait > 0:
        C.note(f"[{BENCH}] --proposal: waiting up to {wait:.0f} s for {path}")
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))  # poll twice a second: read it as soon as it exists
    if not path.exists():
        raise SystemExit(missing_proposal(path, wait))
    blob = torch.load(path, weights_only=False)
    if blob.get("kind") != "lstm" or blob.get("vocab_size") != len(data.vocab):
        raise SystemExit(f"--proposal: expected an lstm.pt of this benchmark (vocab_size {len(data.vocab)}); got {path}")
    lm = new_lstm(len(data.vocab))
    lm.load_state_dict(blob["state_dict"])
    return lm.eval(), {**blob["record"], "loaded_from": str(path)}


def train_all(data: PTBData, kinds: list[str], budget: float, n_logz: int, test: Sequences, seed: int,
              save: Path | None, *, zeta_lr: float = 1e-2, noise_mix: float = 0.0,
              mix_component: str = "unigram", proposal: Path | None = None, max_steps: int | None = None,
              noise_classes: int = 0, proposal_wait: float = 0.0) -> dict[str, Any]:
    """Train and evaluate every model; the records and the models (for the rescoring benchmark). With
    ``proposal``, the LSTM is loaded from it after the TRFs have trained (:func:`load_proposal`)."""
    V = len(data.vocab)
    records: dict[str, Any] = {"lstm": None}
    models: dict[str, Any] = {"lstm": None}

    def lstm() -> LSTMLM:
        """The proposal LSTM, loaded on first use when it comes from ``proposal``."""
        if models["lstm"] is None:
            assert proposal is not None
            models["lstm"], records["lstm"] = load_proposal(proposal, data, proposal_wait)
            C.note(f"[{BENCH}] lstm: loaded from {proposal} ({records['lstm']['steps']} steps, test ppl "
                   f"{records['lstm']['test_perplexity']:.2f})")
        return models["lstm"]

    if proposal is None:
        lm, rec = train_lstm(data, budget, seed)
        p = perplexity(lm, sentence_batches(test, 64, shuffle=False))
        rec.update(test_perplexity=p.perplexity, tokens=p.tokens, peak_rss_mb=peak_rss_mb())
        C.note(f"[{BENCH}] lstm: {rec['steps']} steps ({rec['steps_per_s']:.2f}/s), test ppl {p.perplexity:.2f}")
        records["lstm"], models["lstm"] = rec, lm
        if save is not None:
            save_model(save, "lstm", lm, {"vocab_size": V, "config": LSTM_CFG, "record": rec})
    for kind in kinds:
        if kind == "lstm":
            continue
        trf, rec = train_trf(data, kind, budget, seed, zeta_lr=zeta_lr,
                             noise_mix=noise_mix if kind == "nce" else 0.0, mix_component=mix_component,
                             max_steps=max_steps, noise_classes=noise_classes if kind == "dnce" else 0)
        t0 = time.perf_counter()
        est = reestimate(trf, lstm(), n_logz, seed)
        rec["reestimate_s"] = time.perf_counter() - t0
        rec.update(evaluate_trf(trf, test, est), peak_rss_mb=peak_rss_mb())
        log_z = est.as_log_z(trf.max_length)
        rec["logz_stderr"] = est.stderrs().tolist()
        C.note(f"[{BENCH}] {kind}: {rec['steps']} steps ({rec['steps_per_s']:.2f}/s), test ppl training zeta "
               f"{rec['training_zeta']['perplexity']:.2f}, re-estimated {rec['reestimated']['perplexity']:.2f} "
               f"+- {rec['reestimated']['stderr']:.2f} (re-estimation {rec['reestimate_s']:.0f} s, ESS median "
               f"{rec['ess_median']:.2f}, min {rec['ess_min']:.2f} of {n_logz})")
        records[kind], models[kind] = rec, (trf, log_z, rec)
        if save is not None:
            save_model(save, kind, trf, {"vocab_size": V, "config": TRF_CFG, "reestimated_log_z": log_z,
                                         "record": {k: v for k, v in rec.items() if k != "trace"}})
    lstm()  # --proposal and no TRF: the LSTM's record is still copied
    return {"records": records, "models": models}


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    recorder = SR.start(BENCH, args, seeds=(args.seed,))
    kinds = [k.strip() for k in args.models.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise SystemExit(f"--models: expected a comma list of {', '.join(KINDS)}; got {bad}")
    if args.noise_mix is not None and not 0.0 <= args.noise_mix < 1.0:
        raise SystemExit(f"--noise-mix: expected a weight in [0, 1); got {args.noise_mix}")
    noise_mix = args.noise_mix or 0.0
    if args.max_steps is not None and args.max_steps < 1:
        raise SystemExit(f"--max-steps: expected an int >= 1; got {args.max_steps}")
    if args.proposal_wait < 0:
        raise SystemExit(f"--proposal-wait: expected seconds >= 0; got {args.proposal_wait}")
    if args.proposal_wait > 0 and args.proposal is None:
        raise SystemExit("--proposal-wait: only with --proposal FILE")
    if args.proposal is not None and args.proposal_wait == 0 and not args.proposal.exists():
        raise SystemExit(missing_proposal(args.proposal, 0.0))  # before an hour of training, not after
    budget = args.budget if args.budget is not None else (5.0 if args.quick else 480.0)
    n_logz = args.logz_samples or (2 if args.quick else 40)
    n_test = args.test_sentences if args.test_sentences is not None else (300 if args.quick else 0)
    info = C.machine_info()
    data = load_ptb()
    test = data.test if n_test <= 0 else data.test[torch.arange(min(n_test, data.test.batch_size))]
    test = Sequences(test.tokens[:, : int(test.lengths.max())], test.lengths)
    mix = "" if args.noise_mix is None else f"_mix{noise_mix:g}" + ("_uniform" if args.mix_component == "uniform" else "")
    if args.noise_classes < 0:
        raise SystemExit(f"--noise-classes: expected an int >= 0; got {args.noise_classes}")
    mix += f"_cf{args.noise_classes}" if args.noise_classes else ""
    save = None if args.no_save else args.save or Path(f"{DEFAULT_SAVE}{'_quick' if args.quick else ''}{mix}")
    C.note(f"[{BENCH}] V = {len(data.vocab)}, L = {data.max_length}, budget {budget:.0f} s per model, "
           f"{torch.get_num_threads()} thread(s), test {test.batch_size} sentences")
    out = train_all(data, kinds, budget, n_logz, test, args.seed, save, zeta_lr=args.zeta_lr, noise_mix=noise_mix,
                    mix_component=args.mix_component, proposal=args.proposal, max_steps=args.max_steps,
                    noise_classes=args.noise_classes, proposal_wait=args.proposal_wait)
    records = out["records"]
    rows = []
    for k, r in records.items():
        if k == "lstm":
            rows.append(["lstm (exact)", r["steps"], r["steps_per_s"], r["cpu_s"], r["test_perplexity"], None, None,
                         None, r["peak_rss_mb"]])
        else:
            re = r["reestimated"]
            rows.append([f"trf-{k}", r["steps"], r["steps_per_s"], r["cpu_s"], None, r["training_zeta"]["perplexity"],
                         re["perplexity"], re["stderr"], r["peak_rss_mb"]])
    print(f"PTB, V = {len(data.vocab)}, {budget:.0f} s of training per model, {torch.get_num_threads()} thread(s); "
          f"test: {test.batch_size} sentences, {int(test.lengths.sum()) + test.batch_size} tokens with </s>; "
          f"TRF log Z_l re-estimated by IS, {n_logz} LSTM-proposal draws per length 1..{data.max_length}")
    print(C.format_table(["model", "steps", "steps/s", "cpu_s", "ppl", "ppl(train zeta)", "ppl(re-est)",
                          "stderr", "peak_MB"], rows))
    record = {"bench": BENCH, "quick": args.quick, "machine": info, "budget_s": budget, "threads": args.threads,
              "batch_size": BATCH, "vocab_size": len(data.vocab), "max_length": data.max_length,
              "logz_samples_per_length": n_logz, "zeta_lr": args.zeta_lr, "noise_mix": noise_mix,
              "noise_classes": args.noise_classes, "max_steps": args.max_steps, "mix_component": args.mix_component if noise_mix > 0 else None, "test_sentences": test.batch_size,
              "test_tokens": int(test.lengths.sum()) + test.batch_size, "models": records,
              "saved_to": None if save is None else str(save)}
    name = BENCH + ("_quick" if args.quick else "") + mix
    path = C.save_results(name, record, enabled=not args.no_save)
    if path is not None:
        C.note(f"[{BENCH}] wrote {path}")
    summary: dict[str, Any] = {"bench": BENCH, "quick": args.quick, "budget_s": budget,
                               "lstm_ppl": records["lstm"]["test_perplexity"]}
    for k in ("nce", "dnce"):
        if k in records:
            summary[f"trf_{k}_ppl_training_zeta"] = records[k]["training_zeta"]["perplexity"]
            summary[f"trf_{k}_ppl_reestimated"] = records[k]["reestimated"]["perplexity"]
            summary[f"trf_{k}_ppl_stderr"] = records[k]["reestimated"]["stderr"]
    summary.update({f"{k}_steps_per_s": r["steps_per_s"] for k, r in records.items()})
    commit_record(recorder, args, {**record, "summary": summary}, name=name, notes=(
        "LSTM: exact test perplexity (</s> counted). TRFs: trf_perplexity with the training zeta and with log Z_l "
        "re-estimated by importance sampling from the benchmark's LSTM (length-conditional), delta-method stderr, "
        "ESS per length. budget_s is wall seconds of training per model (max_steps, when set, stops first): "
        "steps, steps_per_s and cpu_s depend on the machine's load (load_avg_1min_at_start)."))
    C.emit_final_line({k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v)
                       for k, v in summary.items()})


if __name__ == "__main__":
    main()
