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

    cli         the command line's path (``ebms train feature-crf-conll2000`` / ``-conll2002``:
                ``FeatureCRFTask`` data, model and objective, full batch): CPU seconds per
                function+gradient evaluation over ``--cli-passes`` passes (after one untimed pass
                that builds the cached design matrix), beside the library's ``fit_feature_crf``
                figure above; ``cli_vs_library`` = CLI / library (1: same speed).

Both runs are sequential in one process (each training is one long measurement, so they are not
interleaved); the machine load at the start is recorded. ``--quick``: the first 1000 training and
500 test sentences, 10 iterations, same comparison (the quality targets apply to the full run
only, so they are reported as ``null`` there). Without python-crfsuite (the ``bench`` extra)
its rows are skipped with one line saying so, and the ebms rows are still measured.

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
import _speed_record as SR
import torch

from ebms.data.conll import load_conll2000, load_conll2002
from ebms.fit import fit_feature_crf
from ebms.metrics.chunking import conlleval
from ebms.metrics.tagging import token_f1
from ebms.models.feature_crf import FeatureCRF
from ebms.structured.features import AttributeVocabulary, chunking_features, ner_features, observed_transitions

warnings.filterwarnings("ignore", message=".*Sparse.*")
TUTORIAL_F1 = 0.770
TARGETS = {"chunking_f1_min": 93.0, "chunking_f1_gap": 0.3, "ner_f1_gap": 0.01}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--iterations", type=int, default=None,
                   help="L-BFGS iterations for chunking (default 100; 10 with --quick)")
    p.add_argument("--tasks", default="chunking,ner", help="comma-separated: chunking, ner")
    p.add_argument("--cli-passes", type=int, default=5,
                   help="timed function+gradient passes of the command line's path per task (0: skip)")


def train_crfsuite(pycrfsuite: Any, xs: list, ys: list, params: dict[str, Any]) -> tuple[Any, dict[str, float]]:
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
               all_transitions: bool) -> tuple[Any, dict[str, Any]]:
    t0 = time.perf_counter()
    vocab = AttributeVocabulary([], tags=list(dict.fromkeys(t for y in ys for t in y)))
    corpus = vocab.encode_flat(iter(xs), grow=True)  # no padding to the longest sentence
    tags = vocab.encode_tags(ys)
    n_tags = len(vocab.tags or [])
    model = FeatureCRF(len(vocab), n_tags, observed=corpus.observed_pairs(tags, len(vocab), n_tags),
                       observed_transitions=None if all_transitions else observed_transitions(
                           tags, corpus.lengths, n_tags))
    prep = time.perf_counter() - t0
    res = fit_feature_crf(model, corpus, None, None, tags, method="lbfgs", c1=c1, c2=c2,
                          max_iterations=iterations, progress=False)
    wall = time.perf_counter() - t0
    cpu = res.cpu_seconds  # CPU time, as CRFsuite's log; wall time kept beside it
    stats = {"iterations": res.iterations, "evaluations": res.evaluations, "train_seconds": wall,
             "prep_seconds": prep, "loop_seconds": res.seconds, "loop_cpu_seconds": cpu,
             "sec_per_iteration": cpu / max(res.iterations, 1),
             "sec_per_evaluation": cpu / max(res.evaluations, 1),
             "wall_sec_per_evaluation": res.seconds / max(res.evaluations, 1), "final_loss": res.loss,
             "stop_reason": res.stop_reason,
             "features": int(model.state_values.numel() + model.transition_values.numel())}
    return (model, vocab), stats


def time_cli(data_name: str, *, c1: float, c2: float, limit: int | None, passes: int) -> dict[str, float]:
    """CPU seconds per function+gradient pass of the command line's feature-CRF path (full batch)."""
    from ebms.cli.config import load_config
    from ebms.cli.tagging import FeatureCRFTask

    overrides = [f"data.name={data_name}", "model.kind=feature-crf", "objective.kind=crf",
                 f"tagging.c1={c1}", f"tagging.c2={c2}", "train.optimizer=lbfgs"]
    if limit is not None:
        overrides.append(f"tagging.limit={limit}")
    task, cfg = FeatureCRFTask(), load_config(None, overrides)
    t0 = time.perf_counter()
    data = task.load(cfg)
    model = task.build_model(cfg, data)
    objective = task.build_objective(cfg, data)
    prep = time.perf_counter() - t0
    assert isinstance(model, FeatureCRF)
    with torch.no_grad():  # a non-trivial point: the weights after a few iterations are not 0
        model.state_values.normal_(0, 0.1, generator=torch.Generator().manual_seed(0))

    def one_pass() -> None:
        model.zero_grad()
        objective(model, data.train).loss.backward()

    one_pass()  # builds the cached design matrix (counted in the setup, as the trainer's first step)
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(passes):
        one_pass()
    return {"passes": passes, "prep_seconds": prep, "sec_per_evaluation": (time.process_time() - c0) / passes,
            "wall_sec_per_evaluation": (time.perf_counter() - w0) / passes}


def warm_up() -> None:
    """One tiny fit, so one-time imports and allocator warm-up stay out of the timed loops."""
    sents = load_conll2000("train")[:20]
    xs, ys = [chunking_features(s) for s in sents], [s.tags for s in sents]
    train_ebms(xs, ys, c1=0.1, c2=1.0, iterations=2, all_transitions=False)


def predict_ebms(model_vocab: tuple[FeatureCRF, AttributeVocabulary], xs: list) -> list[list[str]]:
    model, vocab = model_vocab
    corpus = vocab.encode_flat(iter(xs))
    pred: list[list[str]] = [[] for _ in range(len(corpus))]
    for chunk in torch.argsort(corpus.lengths, stable=True).split(512):  # padded per chunk only
        ids, w, lengths = corpus.padded(chunk)
        for i, row in zip(chunk.tolist(), vocab.decode_tags(model.decode(ids, w, lengths), lengths)):
            pred[i] = row
    return pred


def run_task(name: str, train: list, test: list, extract: Any, *, c1: float, c2: float,
             iterations: int, all_transitions: bool, pycrfsuite: Any) -> dict[str, Any]:
    C.note(f"[{name}] features for {len(train)} train / {len(test)} test sentences")
    xs, ys = [extract(s) for s in train], [s.tags for s in train]
    xt, yt = [extract(s) for s in test], [s.tags for s in test]
    params = {"c1": c1, "c2": c2, "max_iterations": iterations,
              "feature.possible_transitions": all_transitions}
    out: dict[str, Any] = {"train_sentences": len(train), "test_sentences": len(test), "params": params}
    preds: dict[str, list[list[str]]] = {}
    if pycrfsuite is not None:
        C.note(f"[{name}] python-crfsuite: {params}")
        tagger, out["crfsuite"] = train_crfsuite(pycrfsuite, xs, ys, params)
        preds["crfsuite"] = [tagger.tag(x) for x in xt]
    C.note(f"[{name}] ebms FeatureCRF")
    model, out["ebms"] = train_ebms(xs, ys, c1=c1, c2=c2, iterations=iterations, all_transitions=all_transitions)
    del xs
    preds["ebms"] = predict_ebms(model, xt)
    labels = sorted({t for y in ys for t in y} - {"O"})
    for impl, pred in preds.items():
        if name == "chunking":
            out[impl]["f1"] = conlleval(yt, pred).f1
        else:
            out[impl]["f1"] = token_f1(yt, pred, labels=labels, average="weighted")
    if name == "ner":
        out["published_tutorial_f1"] = TUTORIAL_F1
    if "crfsuite" in out:
        theirs, ours = out["crfsuite"], out["ebms"]
        out["f1_gap"] = ours["f1"] - theirs["f1"]
        out["speedup_per_evaluation"] = C.speedup(theirs["sec_per_evaluation"], ours["sec_per_evaluation"])
        out["speedup_per_iteration"] = C.speedup(theirs["sec_per_iteration"], ours["sec_per_iteration"])
    return out


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    rec = SR.start("crf_conll", args)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for t in tasks:
        if t not in ("chunking", "ner"):
            raise SystemExit(f"--tasks: expected chunking and/or ner; got {t!r}")
    n_train, n_test = (1000, 500) if args.quick else (None, None)
    chunk_iters = args.iterations or (10 if args.quick else 100)
    ner_iters = 10 if args.quick else 100
    record: dict[str, Any] = {"bench": "crf_conll", "quick": args.quick,
                              "machine": C.machine_info(["python-crfsuite"])}
    pycrfsuite = C.import_peer("pycrfsuite")
    results: dict[str, Any] = {}
    warm_up()
    settings = {"chunking": ("conll2000", 0.0, 1.0), "ner": ("conll2002-esp", 0.1, 0.1)}
    if "chunking" in tasks:
        results["chunking"] = run_task(
            "chunking", load_conll2000("train")[:n_train], load_conll2000("test")[:n_test],
            chunking_features, c1=0.0, c2=1.0, iterations=chunk_iters, all_transitions=False,
            pycrfsuite=pycrfsuite)
    if "ner" in tasks:
        results["ner"] = run_task(
            "ner", load_conll2002("esp", "train")[:n_train], load_conll2002("esp", "testb")[:n_test],
            ner_features, c1=0.1, c2=0.1, iterations=ner_iters, all_transitions=True, pycrfsuite=pycrfsuite)
    if args.cli_passes > 0:
        for name in tasks:
            data_name, c1, c2 = settings[name]
            C.note(f"[{name}] command-line path ({data_name}), {args.cli_passes} passes")
            cli = time_cli(data_name, c1=c1, c2=c2, limit=n_train, passes=args.cli_passes)
            cli["cli_vs_library"] = cli["sec_per_evaluation"] / results[name]["ebms"]["sec_per_evaluation"]
            results[name]["cli"] = cli
    record["results"] = results
    rows = []
    for name, r in results.items():
        for impl in ("crfsuite", "ebms"):
            if impl not in r:
                rows.append([name, impl, "skipped (pip install -e \".[bench]\")", "", "", "", "", ""])
                continue
            s = r[impl]
            rows.append([name, impl, s["f1"], s["iterations"], s["evaluations"], s["sec_per_evaluation"],
                         s["sec_per_iteration"], s["train_seconds"]])
        if "cli" in r:
            rows.append([name, "ebms CLI path", "", "", r["cli"]["passes"], r["cli"]["sec_per_evaluation"], "", ""])
    print(C.format_table(["task", "impl", "F1", "iters", "evals", "cpu s/eval", "cpu s/iter",
                          "train wall s"], rows))
    summary: dict[str, Any] = {"bench": "crf_conll", "quick": args.quick}
    if "chunking" in results:
        r = results["chunking"]
        theirs = r.get("crfsuite")
        summary.update(chunk_f1_ebms=r["ebms"]["f1"], chunk_f1_crfsuite=theirs and theirs["f1"],
                       chunk_speedup_per_eval=r.get("speedup_per_evaluation"),
                       chunk_cli_vs_library=r.get("cli", {}).get("cli_vs_library"),
                       chunk_target_met=None if args.quick or theirs is None else bool(
                           r["ebms"]["f1"] >= TARGETS["chunking_f1_min"]
                           and abs(r["f1_gap"]) <= TARGETS["chunking_f1_gap"]))
    if "ner" in results:
        r = results["ner"]
        theirs = r.get("crfsuite")
        summary.update(ner_f1_ebms=r["ebms"]["f1"], ner_f1_crfsuite=theirs and theirs["f1"],
                       ner_f1_published=TUTORIAL_F1, ner_speedup_per_eval=r.get("speedup_per_evaluation"),
                       ner_cli_vs_library=r.get("cli", {}).get("cli_vs_library"),
                       ner_target_met=None if args.quick or theirs is None else bool(
                           abs(r["f1_gap"]) <= TARGETS["ner_f1_gap"]))
    record["summary"] = summary
    path = C.save_results("crf_conll_quick" if args.quick else "crf_conll", record,
                          enabled=not args.no_save)
    if path is not None:
        C.note(f"saved {path}")
    SR.finish(rec, args, record, settings={"tasks": tasks, "chunking_iterations": chunk_iters,
                                           "ner_iterations": ner_iters, "cli_passes": args.cli_passes}, notes=(
        "One run per task (deterministic L-BFGS / OWL-QN; crfsuite then ebms, sequential in one process). "
        "F1: chunking = conlleval chunk F1 (%) on the CoNLL-2000 test set; ner = token F1 weighted over the "
        "labels but O on CoNLL-2002 esp testb (fraction). sec_per_evaluation / sec_per_iteration: process CPU "
        "seconds (crfsuite from its own log); speedup_per_evaluation = crfsuite / ebms (> 1: ebms faster). "
        "cli: the command line's path, CPU s per function+gradient pass; cli_vs_library = CLI / library. "
        "Shared 2-core machine: the CPU-time ratios are the robust figures."))
    C.emit_final_line(summary)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
