"""Feature CRF quality and training speed: ebms ``FeatureCRF`` vs python-crfsuite, same attributes.

Workload (identical for both implementations):
    chunking    CoNLL-2000 (``ebms.data.load_conll2000``), CRFsuite's benchmark attribute template
                (``ebms.structured.features.chunking_features``), CRFsuite's default feature
                generation (attribute-label pairs and label bigrams seen in training), L-BFGS,
                ``c1 = 0``, ``c2 = 1`` (CRFsuite's defaults), ``--iterations`` L-BFGS iterations
                at most with CRFsuite's stopping rule (epsilon 1e-5, delta 1e-5 over 10 iterations)
                for both. Score: chunk F1 by ``ebms.metrics.conlleval`` on the test set.
    ner         CoNLL-2002 Spanish (``load_conll2002("esp", ...)``), the sklearn-crfsuite tutorial's
                ``word2features`` (``ner_features``), its settings: L-BFGS (OWL-QN), ``c1 = 0.1``,
                ``c2 = 0.1``, 100 iterations, all possible transitions. Score: token F1 on testb,
                weighted over every label but ``O`` (``ebms.metrics.tagging.token_f1``); the
                tutorial's published figure is 0.770.
    speed       CPU seconds per function+gradient evaluation (one pass over the training set) and
                per L-BFGS iteration, single thread: crfsuite's from its own per-iteration log
                (it times iterations with ``clock()``, process CPU time), ours from the training
                loop's ``time.process_time()`` (wall time recorded beside it). CPU time is the
                fair figure on a shared machine, where wall time depends on the other jobs.
                ``speedup = crfsuite / ebms`` (> 1: ebms faster).

Both runs are sequential in one process (each training is one long measurement, so they are not
interleaved); the machine load at the start is recorded. ``--quick``: the first 1000 training and
500 test sentences, 10 iterations, same comparison (the quality targets apply to the full run
only, so they are reported as ``null`` there).

Run: ``python benchmarks/crf_conll.py [--quick] [--iterations N] [--tasks chunking,ner]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from typing import Any

import _common as C
import torch

from ebms.data.conll import load_conll2000, load_conll2002
from ebms.metrics.chunking import conlleval
from ebms.metrics.tagging import token_f1
from ebms.models.feature_crf import FeatureCRF, fit_feature_crf
from ebms.structured.features import (
    AttributeVocabulary,
    chunking_features,
    ner_features,
    observed_pairs,
    observed_transitions,
)

warnings.filterwarnings("ignore", message=".*Sparse.*")
TUTORIAL_F1 = 0.770
TARGETS = {"chunking_f1_min": 93.0, "chunking_f1_gap": 0.3, "ner_f1_gap": 0.01}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--iterations", type=int, default=None,
                   help="L-BFGS iterations for chunking (default 100; 10 with --quick)")
    p.add_argument("--tasks", default="chunking,ner", help="comma-separated: chunking, ner")


def train_crfsuite(xs: list, ys: list, params: dict[str, Any]) -> tuple[Any, dict[str, float]]:
    import pycrfsuite

    trainer = pycrfsuite.Trainer(verbose=False)
    for x, y in zip(xs, ys):
        trainer.append(x, y)
    trainer.select("lbfgs")
    trainer.set_params(params)
    fd, path = tempfile.mkstemp(suffix=".crfsuite")
    os.close(fd)
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.train(path)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    its = trainer.logparser.iterations
    secs = sum(i["time"] for i in its)  # CRFsuite times each iteration with clock(): CPU time
    evals = sum(i["linesearch_trials"] for i in its)
    tagger = pycrfsuite.Tagger()
    tagger.open(path)
    os.remove(path)
    stats = {"iterations": len(its), "evaluations": evals, "train_seconds": wall,
             "train_cpu_seconds": cpu, "loop_cpu_seconds": secs,
             "sec_per_iteration": secs / max(len(its), 1),
             "sec_per_evaluation": secs / max(evals, 1), "final_loss": its[-1]["loss"] if its else None}
    return tagger, stats


def train_ebms(xs: list, ys: list, *, c1: float, c2: float, iterations: int,
               all_transitions: bool) -> tuple[Any, dict[str, float]]:
    t0 = time.perf_counter()
    vocab = AttributeVocabulary.fit(xs, ys)
    ids, w, lengths = vocab.encode(xs)
    tags = vocab.encode_tags(ys)
    n_tags = len(vocab.tags or [])
    model = FeatureCRF(len(vocab), n_tags, observed=observed_pairs(ids, tags, lengths, len(vocab), n_tags),
                       observed_transitions=None if all_transitions else observed_transitions(tags, lengths, n_tags))
    prep = time.perf_counter() - t0
    res = fit_feature_crf(model, ids, w, lengths, tags, method="lbfgs", c1=c1, c2=c2,
                          max_iterations=iterations, progress=False)
    wall = time.perf_counter() - t0
    cpu = res.cpu_seconds  # CPU time, as CRFsuite's log; wall time kept beside it
    stats = {"iterations": res.iterations, "evaluations": res.evaluations, "train_seconds": wall,
             "prep_seconds": prep, "loop_seconds": res.seconds, "loop_cpu_seconds": cpu,
             "sec_per_iteration": cpu / max(res.iterations, 1),
             "sec_per_evaluation": cpu / max(res.evaluations, 1),
             "wall_sec_per_evaluation": res.seconds / max(res.evaluations, 1), "final_loss": res.loss,
             "stop_reason": res.stop_reason, "features": int(model.state_mask.sum()) + (
                 n_tags * n_tags if all_transitions else int(model.transition_mask.sum()))}
    return (model, vocab), stats


def warm_up() -> None:
    """One tiny fit, so one-time imports and allocator warm-up stay out of the timed loops."""
    sents = load_conll2000("train")[:20]
    xs, ys = [chunking_features(s) for s in sents], [s.tags for s in sents]
    train_ebms(xs, ys, c1=0.1, c2=1.0, iterations=2, all_transitions=False)


def predict_ebms(model_vocab: tuple[FeatureCRF, AttributeVocabulary], xs: list) -> list[list[str]]:
    model, vocab = model_vocab
    ids, w, lengths = vocab.encode(xs)
    return vocab.decode_tags(model.decode(ids, w, lengths), lengths)


def run_task(name: str, train: list, test: list, extract: Any, *, c1: float, c2: float,
             iterations: int, all_transitions: bool) -> dict[str, Any]:
    C.note(f"[{name}] features for {len(train)} train / {len(test)} test sentences")
    xs, ys = [extract(s) for s in train], [s.tags for s in train]
    xt, yt = [extract(s) for s in test], [s.tags for s in test]
    params = {"c1": c1, "c2": c2, "max_iterations": iterations,
              "feature.possible_transitions": all_transitions}
    C.note(f"[{name}] python-crfsuite: {params}")
    tagger, theirs = train_crfsuite(xs, ys, params)
    pred_theirs = [tagger.tag(x) for x in xt]
    C.note(f"[{name}] ebms FeatureCRF")
    model, ours = train_ebms(xs, ys, c1=c1, c2=c2, iterations=iterations, all_transitions=all_transitions)
    pred_ours = predict_ebms(model, xt)
    out: dict[str, Any] = {"train_sentences": len(train), "test_sentences": len(test),
                           "params": params, "crfsuite": theirs, "ebms": ours}
    if name == "chunking":
        theirs["f1"] = conlleval(yt, pred_theirs).f1
        ours["f1"] = conlleval(yt, pred_ours).f1
    else:
        labels = sorted({t for y in ys for t in y} - {"O"})
        theirs["f1"] = token_f1(yt, pred_theirs, labels=labels, average="weighted")
        ours["f1"] = token_f1(yt, pred_ours, labels=labels, average="weighted")
        out["published_tutorial_f1"] = TUTORIAL_F1
    out["f1_gap"] = ours["f1"] - theirs["f1"]
    out["speedup_per_evaluation"] = C.speedup(theirs["sec_per_evaluation"], ours["sec_per_evaluation"])
    out["speedup_per_iteration"] = C.speedup(theirs["sec_per_iteration"], ours["sec_per_iteration"])
    return out


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for t in tasks:
        if t not in ("chunking", "ner"):
            raise SystemExit(f"--tasks: expected chunking and/or ner; got {t!r}")
    n_train, n_test = (1000, 500) if args.quick else (None, None)
    chunk_iters = args.iterations or (10 if args.quick else 100)
    ner_iters = 10 if args.quick else 100
    record: dict[str, Any] = {"bench": "crf_conll", "quick": args.quick,
                              "machine": C.machine_info(["python-crfsuite"])}
    results: dict[str, Any] = {}
    warm_up()
    if "chunking" in tasks:
        results["chunking"] = run_task(
            "chunking", load_conll2000("train")[:n_train], load_conll2000("test")[:n_test],
            chunking_features, c1=0.0, c2=1.0, iterations=chunk_iters, all_transitions=False)
    if "ner" in tasks:
        results["ner"] = run_task(
            "ner", load_conll2002("esp", "train")[:n_train], load_conll2002("esp", "testb")[:n_test],
            ner_features, c1=0.1, c2=0.1, iterations=ner_iters, all_transitions=True)
    record["results"] = results
    rows = []
    for name, r in results.items():
        for impl in ("crfsuite", "ebms"):
            s = r[impl]
            rows.append([name, impl, s["f1"], s["iterations"], s["evaluations"], s["sec_per_evaluation"],
                         s["sec_per_iteration"], s["train_seconds"]])
    print(C.format_table(["task", "impl", "F1", "iters", "evals", "cpu s/eval", "cpu s/iter",
                          "train wall s"], rows))
    summary: dict[str, Any] = {"bench": "crf_conll", "quick": args.quick}
    if "chunking" in results:
        r = results["chunking"]
        summary.update(chunk_f1_ebms=r["ebms"]["f1"], chunk_f1_crfsuite=r["crfsuite"]["f1"],
                       chunk_speedup_per_eval=r["speedup_per_evaluation"],
                       chunk_target_met=None if args.quick else bool(
                           r["ebms"]["f1"] >= TARGETS["chunking_f1_min"]
                           and abs(r["f1_gap"]) <= TARGETS["chunking_f1_gap"]))
    if "ner" in results:
        r = results["ner"]
        summary.update(ner_f1_ebms=r["ebms"]["f1"], ner_f1_crfsuite=r["crfsuite"]["f1"],
                       ner_f1_published=TUTORIAL_F1, ner_speedup_per_eval=r["speedup_per_evaluation"],
                       ner_target_met=None if args.quick else bool(
                           abs(r["f1_gap"]) <= TARGETS["ner_f1_gap"]))
    record["summary"] = summary
    path = C.save_results("crf_conll_quick" if args.quick else "crf_conll", record,
                          enabled=not args.no_save)
    if path is not None:
        C.note(f"saved {path}")
    C.emit_final_line(summary)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
