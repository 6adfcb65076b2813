"""KN5 on PTB: ebms ``BackoffNGram`` vs NLTK's ``KneserNeyInterpolated`` and KenLM on the same ARPA.

Workload (identical for every implementation):
    data        Penn Treebank, Mikolov's splits (``ebms.data.text.ptb``; 887,521 / 70,390 / 78,669
                words in 42,068 / 3,370 / 3,761 sentences); the vocabulary is the training words
                (``Vocabulary.build``: 10,000 ids, ``</s>`` and ``<unk>`` included).
    quality     interpolated modified Kneser-Ney, order 5, no pruning, discounts estimated from the
                counts-of-counts (Chen & Goodman 1998; SRILM ``-kndiscount -interpolate``, KenLM
                ``lmplz``), trained on train. Perplexity ``exp(-sum log p / (words + sentences))``
                (``</s>`` counts as a token) on test (82,430 tokens) and valid, beside the published
                KN5 141.2 (Mikolov, Deoras, Kombrink, Burget, Cernocky 2011, "Empirical evaluation and
                combination of advanced language modeling techniques", table: KN5 without count
                cutoffs); target within 1 %. Tokens with a non-finite log-probability are counted.
    training    wall seconds of ``BackoffNGram.fit`` (counting, discounts, tables), median of repeats;
                the process's peak resident memory (``ru_maxrss``) after training and scoring, before
                the peers run, and the bytes of the model's tables.
    scoring     tokens per second of ``token_log_probs`` over the whole test set (one batch,
                ``--threads`` threads; its lookup tables, built once per model at the first
                call, are built and timed beforehand: ``lookup_tables_s``) against KenLM (the
                ``kenlm`` query package) loading the ARPA file written by ``to_arpa`` and scoring
                each test sentence with ``model.score(s, bos=True, eos=True)``, interleaved
                repeats, medians; KenLM's scores
                are compared with ours (largest difference in log10). NLTK: ``KneserNeyInterpolated``
                of order 3 (its scoring is slow) trained on the same training sentences, scored token
                by token with ``logscore`` on the first test tokens for ``--nltk-seconds``, against
                ebms's KN3 on the same training sentences scoring the whole test set; the share of
                NLTK's tokens with infinite perplexity is reported. Target: at least 1000x NLTK.

``--quick``: 3 repeats; NLTK and the KN3 it is compared with are trained on the first 5,000
training sentences (NLTK's training on all of them takes about 40 s) and scored for 3 s; the KN5
figures are the full ones. A missing peer (``kenlm``, ``nltk``) is one line and its rows are
skipped. Run: ``python benchmarks/ngram.py [--quick] [--threads N] [--nltk-seconds S]``.

A full run (not ``--quick``, not ``--no-save``) also writes the committed record
``benchmarks/records/ngram.json`` (``_speed_record``: summaries without the per-repeat lists). The
published KN5 figure is the run's target only: it is not copied into that record.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import tempfile
import time
from typing import Any

import _common as C
import _speed_record as SR
import torch

from ebms.data.text import Vocabulary, ptb
from ebms.distributions import BackoffNGram
from ebms.sequences import Sequences

PUBLISHED_KN5 = 141.2
TARGETS = {"ppl_rel_gap_max": 0.01, "speedup_vs_nltk_min": 1000.0}
#: summary keys that hold or derive from the published figure: not part of the committed record.
_PUBLISHED_KEYS = ("published_kn5_ppl", "ppl_rel_gap", "ppl_within_1pct")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--order", type=int, default=5, help="order of the main model (default 5)")
    p.add_argument("--nltk-seconds", type=float, default=None,
                   help="seconds of NLTK scoring (default 20; 3 with --quick)")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def perplexity(lm: BackoffNGram, data: Sequences) -> tuple[float, int]:
    tl = lm.token_log_probs(data)
    keep = torch.arange(tl.shape[1]) <= data.lengths.unsqueeze(1)
    tokens = int(data.lengths.sum()) + data.batch_size
    return math.exp(-float(tl.sum()) / tokens), int((~torch.isfinite(tl[keep])).sum())


def table_bytes(lm: BackoffNGram) -> int:
    return sum(b.numel() * b.element_size() for b in lm.buffers())


def bench_kenlm(kenlm: Any, lm: BackoffNGram, vocab: Vocabulary, test: Sequences, sents: list[str],
                repeats: int) -> dict[str, Any]:
    fd, path = tempfile.mkstemp(suffix=".arpa")
    os.close(fd)
    try:
        t0 = time.perf_counter()
        lm.to_arpa(path, vocab.tokens)
        write_s = time.perf_counter() - t0
        size = os.path.getsize(path)
        t0 = time.perf_counter()
        model = kenlm.Model(path)
        load_s = time.perf_counter() - t0
    finally:
        os.remove(path)
    theirs = torch.tensor([model.score(s, bos=True, eos=True) for s in sents], dtype=torch.float64)
    diff = float((lm.log_prob(test) / math.log(10) - theirs).abs().max())
    tokens = int(test.lengths.sum()) + test.batch_size
    wall, cpu = C.time_alternating({"ebms": lambda: lm.token_log_probs(test),
                                    "kenlm": lambda: [model.score(s, bos=True, eos=True) for s in sents]},
                                   repeats=repeats)
    return {"arpa_write_s": write_s, "arpa_bytes": size, "kenlm_load_s": load_s, "max_abs_diff_log10": diff,
            "kenlm_ppl": 10 ** (-float(theirs.sum()) / tokens),
            "ebms_score_s": C.median(wall["ebms"]), "kenlm_score_s": C.median(wall["kenlm"]),
            "ebms_tokens_per_s": tokens / C.median(wall["ebms"]), "kenlm_tokens_per_s": tokens / C.median(wall["kenlm"]),
            "all_s": wall, "cpu_s": cpu}


def bench_nltk(nltk_lm: Any, train: list[list[str]], test: list[list[str]], seconds: float) -> dict[str, Any]:
    from nltk.lm.preprocessing import pad_both_ends, padded_everygram_pipeline

    t0 = time.perf_counter()
    data, words = padded_everygram_pipeline(3, train)
    model = nltk_lm.KneserNeyInterpolated(3)
    model.fit(data, words)
    fit_s = time.perf_counter() - t0
    scored = infinite = 0
    t0 = time.perf_counter()
    for s in test:
        padded = list(pad_both_ends(s, 3))
        for i in range(2, len(padded)):
            infinite += math.isinf(model.logscore(padded[i], padded[i - 2 : i]))
            scored += 1
        if time.perf_counter() - t0 > seconds:
            break
    score_s = time.perf_counter() - t0
    return {"fit_s": fit_s, "tokens_scored": scored, "score_s": score_s, "tokens_per_s": scored / score_s,
            "infinite_tokens": infinite, "infinite_share": infinite / max(scored, 1)}


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    rec = SR.start("ngram", args)
    repeats = args.repeats or (3 if args.quick else 9)
    nltk_seconds = args.nltk_seconds if args.nltk_seconds is not None else (3.0 if args.quick else 20.0)
    info = C.machine_info(["kenlm", "nltk"])
    t0 = time.perf_counter()
    train_words, valid_words, test_words = ptb("train"), ptb("valid"), ptb("test")
    vocab = Vocabulary.build(train_words)
    train, valid, test = (vocab.encode(s) for s in (train_words, valid_words, test_words))
    C.note(f"[ngram] PTB read and encoded in {time.perf_counter() - t0:.1f} s; V = {len(vocab)}")
    rss_data = peak_rss_mb()

    fit = {}

    def fit_once() -> None:
        fit["lm"] = BackoffNGram.fit(train, len(vocab), args.order)

    fit_wall = C.time_alternating({"fit": fit_once}, repeats=repeats)[0]["fit"]
    lm: BackoffNGram = fit["lm"]
    fit_s = C.median(fit_wall)
    t0 = time.perf_counter()
    lm._hash_tables()  # the scorer's lookup tables (built at the first scoring call otherwise)
    tables_s = time.perf_counter() - t0
    test_ppl, nonfinite = perplexity(lm, test)
    valid_ppl, nonfinite_valid = perplexity(lm, valid)
    rss_ours = peak_rss_mb()
    C.note(f"[ngram] KN{args.order}: fit {fit_s:.2f} s, test ppl {test_ppl:.2f}, peak RSS {rss_ours:.0f} MB")

    kenlm = C.import_peer("kenlm")
    sents = [" ".join(s) for s in test_words]
    ken = bench_kenlm(kenlm, lm, vocab, test, sents, repeats) if kenlm is not None else None
    if ken is None:
        wall, _ = C.time_alternating({"ebms": lambda: lm.token_log_probs(test)}, repeats=repeats)
        ours_tps = (int(test.lengths.sum()) + test.batch_size) / C.median(wall["ebms"])
    else:
        ours_tps = ken["ebms_tokens_per_s"]

    nltk_lm = C.import_peer("nltk.lm")
    n_train = 5000 if args.quick else len(train_words)
    kn3 = BackoffNGram.fit(train[:n_train], len(vocab), 3)
    wall, _ = C.time_alternating({"ebms-kn3": lambda: kn3.token_log_probs(test)}, repeats=repeats)
    kn3_tps = (int(test.lengths.sum()) + test.batch_size) / C.median(wall["ebms-kn3"])
    nl = bench_nltk(nltk_lm, train_words[:n_train], test_words, nltk_seconds) if nltk_lm is not None else None

    gap = test_ppl / PUBLISHED_KN5 - 1
    tokens = int(test.lengths.sum()) + test.batch_size
    print(f"KN{args.order} on PTB (V = {len(vocab)}, n-grams per order {list(lm.num_ngrams)}), "
          f"{info['threads']} thread(s); speedup = their time / ebms time")
    rows = [["ebms BackoffNGram", f"KN{args.order}", fit_s, ours_tps, None, test_ppl, nonfinite]]
    if ken is not None:
        rows.append(["kenlm (our ARPA)", f"KN{args.order}", None, ken["kenlm_tokens_per_s"],
                     ours_tps / ken["kenlm_tokens_per_s"], ken["kenlm_ppl"], None])
    else:
        rows.append(["kenlm", "skipped (pip install kenlm)", None, None, None, None, None])
    rows.append([f"ebms BackoffNGram ({n_train} sents)", "KN3", None, kn3_tps, None, None, None])
    if nl is not None:
        rows.append([f"nltk KneserNeyInterpolated ({n_train} sents)", "KN3", nl["fit_s"], nl["tokens_per_s"],
                     kn3_tps / nl["tokens_per_s"], None, nl["infinite_tokens"]])
    else:
        rows.append(["nltk", "skipped (pip install nltk)", None, None, None, None, None])
    print(C.format_table(["implementation", "model", "fit s", "tokens/s", "speedup", "test ppl", "non-finite"], rows))
    print(f"test perplexity {test_ppl:.2f} (published KN5 {PUBLISHED_KN5}; gap {100 * gap:+.2f} %, target "
          f"within 1 %), valid {valid_ppl:.2f}; {tokens} test tokens, {nonfinite} non-finite")
    print(f"scoring lookup tables (cuckoo hash of the n-gram keys) built in {tables_s:.2f} s, once per model")
    print(f"peak RSS {rss_ours:.0f} MB after training and scoring ({rss_data:.0f} MB with the data alone); "
          f"tables {table_bytes(lm) / 2**20:.0f} MiB")
    if ken is not None:
        print(f"kenlm vs ebms scores: largest |difference| {ken['max_abs_diff_log10']:.1e} (log10); ARPA "
              f"{ken['arpa_bytes'] / 1e6:.0f} MB written in {ken['arpa_write_s']:.1f} s, loaded by kenlm in "
              f"{ken['kenlm_load_s']:.1f} s")
    if nl is not None:
        print(f"nltk scored {nl['tokens_scored']} tokens in {nl['score_s']:.1f} s, {nl['infinite_tokens']} "
              f"({100 * nl['infinite_share']:.1f} %) with infinite perplexity; fit {nl['fit_s']:.1f} s")

    summary = {"bench": "ngram", "quick": args.quick, "threads": info["threads"], "order": args.order,
               "test_ppl": round(test_ppl, 3), "published_kn5_ppl": PUBLISHED_KN5, "ppl_rel_gap": round(gap, 5),
               "valid_ppl": round(valid_ppl, 3), "nonfinite_tokens": nonfinite + nonfinite_valid,
               "fit_s": round(fit_s, 3), "lookup_tables_s": round(tables_s, 3), "ebms_tokens_per_s": round(ours_tps),
               "kenlm_tokens_per_s": round(ken["kenlm_tokens_per_s"]) if ken else None,
               "speedup_vs_kenlm": round(ours_tps / ken["kenlm_tokens_per_s"], 3) if ken else None,
               "kenlm_max_abs_diff_log10": ken["max_abs_diff_log10"] if ken else None,
               "ebms_kn3_tokens_per_s": round(kn3_tps),
               "nltk_tokens_per_s": round(nl["tokens_per_s"], 2) if nl else None,
               "speedup_vs_nltk": round(kn3_tps / nl["tokens_per_s"]) if nl else None,
               "nltk_infinite_share": round(nl["infinite_share"], 4) if nl else None,
               "peak_rss_mb": round(rss_ours), "table_mib": round(table_bytes(lm) / 2**20, 1),
               "ppl_within_1pct": abs(gap) <= TARGETS["ppl_rel_gap_max"],
               "speedup_vs_nltk_ok": (kn3_tps / nl["tokens_per_s"] >= TARGETS["speedup_vs_nltk_min"]) if nl else None}
    record = {"bench": "ngram", "quick": args.quick, "machine": info, "targets": TARGETS,
              "workload": {"order": args.order, "vocab": len(vocab), "ngrams": list(lm.num_ngrams),
                           "test_tokens": tokens, "nltk_train_sentences": n_train, "nltk_seconds": nltk_seconds,
                           "repeats": repeats},
              "ebms": {"fit_s": fit_s, "fit_all_s": fit_wall, "lookup_tables_s": tables_s, "test_ppl": test_ppl,
                       "valid_ppl": valid_ppl,
                       "discounts": lm.discounts, "peak_rss_mb": rss_ours, "data_rss_mb": rss_data,
                       "kn3_tokens_per_s": kn3_tps},
              "kenlm": ken and {k: v for k, v in ken.items()}, "nltk": nl, "summary": summary}
    path = C.save_results("ngram", record, enabled=not args.no_save)
    committed = {**record, "summary": {k: v for k, v in summary.items() if k not in _PUBLISHED_KEYS}}
    SR.finish(rec, args, committed, settings={"nltk_seconds": nltk_seconds}, notes=(
        "Perplexities: exp(-sum log p / (words + sentences)), </s> counted, PTB test (82,430 tokens) and "
        "valid. fit_s: median wall seconds of BackoffNGram.fit over the repeats. Tokens per second: whole "
        "test set, medians of interleaved repeats, one process, --threads torch threads; kenlm scores each "
        "sentence from the ARPA file written by to_arpa; lookup_tables_s: building ebms's scoring lookup "
        "tables (once per model, before the timed calls; kenlm_load_s is KenLM's load). KN3 rows: ebms and "
        "NLTK trained on the same training sentences (nltk_train_sentences), NLTK scored for nltk_seconds. Speeds and memory are "
        "shared-machine figures (see load_avg_1min_at_start). The published KN5 perplexity the run "
        "compares with is left out of this record (not a measurement)."))
    if path is not None:
        C.note(f"[ngram] wrote {path}")
    C.emit_final_line(summary)


if __name__ == "__main__":
    main()
