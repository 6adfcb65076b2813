"""Semi-supervised chunking with a joint random field: supervised neural CRF vs self-training vs JRF (CoNLL-2000).

Workload (the monograph's Table 5.3 chunking column, scaled to CPU; §5.3, Song et al. 2020):
    data        CoNLL-2000 (``ebms.data.load_conll2000``; ``$EBMS_DATA``). A fixed draw (seed
                ``DEV_SEED``) holds out ``--dev`` training sentences as the development set; of the
                rest, a seeded draw (seed = the run's seed) labels ``fraction x`` the training
                sentences (``--fractions``, default 1 % and 10 %) and leaves the others unlabelled
                (their words only). The test set is scored once per method, with the configuration
                chosen on the development set.
    network     one network for every method: an ``ebms.models.JRF`` (word embedding ``--embed``,
                BiLSTM ``--hidden`` units per direction, linear node potentials, transitions with
                start/end scores), ids from ``WordVocabulary`` over the non-held-out training words.
    methods     ``supervised``: the JRF's CRF trained by likelihood on the labelled sentences only
                (``JRFObjective(None, alpha=0)``, the CRF NLL exactly); ``self_training``:
                ``ebms.fit.self_train`` (``--rounds`` rounds, sequence-posterior threshold from
                ``--thresholds``, a fresh network per round, the round with the best development F1
                kept); ``jrf``: ``JRFObjective`` (CRF NLL on a
                labelled batch + ``alpha`` x DNCE on an unlabelled batch of the same size, noise = an
                ``LSTMLM`` pre-trained ``--noise-steps`` steps by likelihood on the unlabelled text and
                trained on with DNCE; ``zeta`` initialised from data (below) and learned with
                ``--zeta-lr``; ``alpha`` from ``--alphas``).
    budget      every training run: ``--steps`` Adam steps (lr ``--lr``), batch ``--batch`` labelled
                sentences (JRF: plus as many unlabelled ones), gradient norm clipped at 5. Self-training
                makes ``rounds + 1`` such runs; JRF adds the noise pre-training. Seconds per method
                (wall and process CPU, everything from the first step to the selected model) are
                reported beside the scores.
    selection   hyper-parameters are chosen on the held-out development set, never on test: each
                run keeps the checkpoint with the best development F1 (evaluated every
                ``--eval-every`` steps), and for a method with several candidates (``--alphas``,
                ``--thresholds``) the candidate with the best development F1 is the one scored on
                test. Every candidate's development F1 is in the JSON record.
    score       chunk F1 by ``ebms.metrics.conlleval`` (through ``ebms.metrics.evaluate_tagger``) on
                the test set.

``zeta`` initialisation: ``zeta_l`` is set so that the JRF's marginal ``log p(l, x) = log pi_l + U(x) -
zeta_l`` equals the noise's ``log q(x)`` on average over unlabelled sentences of length ``l`` (at most
2000 of them); lengths with no such sentence take a straight-line fit in ``l``. NCE then starts with the
classifier near chance instead of saturated (the default ``l log((V - 1) K)`` is far off for a network
trained from scratch with a 10k-word vocabulary).

Published anchor: Table 5.3 gives relative improvements of joint-training EBMs over the supervised
CRF on CoNLL-2000 chunking of 16.5-20.3 % (2 % labelled) and 18.0-21.8 % (10 % labelled) with U/L of
50-500 from the 1B-word corpus; here the unlabelled text is the rest of CoNLL-2000's training set
(U/L about 94 at 1 %, 8 at 10 %), so only the direction and rough size compare. Ours are given both
as the relative F1 gain and as the relative reduction of ``100 - F1``.

Seeds: development hold-out ``DEV_SEED = 12345``; for a run seed ``s`` (``--seeds``): the label draw,
network initialisation, batch order and noise draws all derive from ``s`` (the same network
initialisation for every method). ``--quick``: the first 400 training and 150 test sentences, 40
steps, one candidate each, one self-training round (smoke-scale; the figures mean little).

Cost: a JRF step took about 1.3 CPU seconds on the full data (the supervised CRF about 0.05), most
of it in the noise LM's output layer over the ~8.8k-word vocabulary (scoring data and draws, and its
backward pass); the defaults (two alphas, two thresholds, two fractions, 1000 steps) take about one
and a half to two hours on one core.
``--min-count`` (a smaller vocabulary) makes every method cheaper.

Over several seeds (``--seeds 0,1,2``) each fraction's JRF and self-training F1 are compared with the
supervised CRF's by ``ebms.metrics.compare_over_seeds`` (paired by seed: the same label draw, network
initialisation and development split), and the comparison, its interval and its verdict go into the record.

Record: ``benchmarks/records/<--record>.json`` (default ``jrf_conll``, ``jrf_conll_quick`` with ``--quick``;
``benchmarks/_record.py``): settings, per-seed test F1 / precision / recall / token accuracy of every
method, the chosen candidates, seconds, the per-fraction means and the comparisons. The full per-run
detail (development curves, every candidate) goes to ``benchmarks/results/`` (not committed).

Run: ``python benchmarks/jrf_conll.py [--quick] [--fractions 0.01,0.1] [--seeds 0] [--steps 1000] [--record NAME]``.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import _common as C
import torch
from _record import Recorder
from torch import Tensor

from ebms.data.conll import load_conll2000, tag_names
from ebms.data.vocab import WordVocabulary
from ebms.fit import init_log_z, pretrain_noise_lm, self_train
from ebms.metrics.seeds import compare_over_seeds
from ebms.metrics.tagger_eval import evaluate_tagger
from ebms.models.jrf import JRF
from ebms.models.lm import LSTMLM
from ebms.objectives.jrf import JRFObjective
from ebms.sequences import Sequences

DEV_SEED = 12345
METHODS = ("supervised", "self_training", "jrf")
#: Table 5.3, chunking, "sup." column: relative improvement (%) of joint training over the supervised CRF.
PUBLISHED = {"2%": (16.5, 20.3), "10%": (18.0, 21.8)}


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fractions", default="0.01,0.1", help="labelled fractions of the training sentences")
    p.add_argument("--seeds", default="0", help="comma-separated run seeds (label draw, init, batches)")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ", ".join(METHODS))
    p.add_argument("--steps", type=int, default=None, help="Adam steps per training run (default 1000; quick 40)")
    p.add_argument("--eval-every", type=int, default=None, help="development evaluation interval (default steps/4)")
    p.add_argument("--batch", type=int, default=32, help="labelled sentences per step (JRF: as many unlabelled)")
    p.add_argument("--lr", type=float, default=5e-3, help="Adam learning rate of the network (and the noise LM)")
    p.add_argument("--embed", type=int, default=50, help="word embedding width")
    p.add_argument("--hidden", type=int, default=64, help="BiLSTM units per direction")
    p.add_argument("--dev", type=int, default=None, help="held-out training sentences (default 500; quick 60)")
    p.add_argument("--limit-train", type=int, default=None, help="use the first N training sentences")
    p.add_argument("--limit-test", type=int, default=None, help="use the first N test sentences")
    p.add_argument("--alphas", default=None, help="JRF alpha candidates (default 0.3,1.0; quick 1.0)")
    p.add_argument("--thresholds", default=None, help="self-training thresholds (default 0.9,0.99; quick 0.9)")
    p.add_argument("--rounds", type=int, default=None, help="self-training rounds (default 2; quick 1)")
    p.add_argument("--noise-hidden", type=int, default=64, help="LSTM noise LM width (embedding and hidden)")
    p.add_argument("--noise-steps", type=int, default=None, help="noise LM pre-training steps (default 200; quick 20)")
    p.add_argument("--zeta-lr", type=float, default=0.05, help="Adam learning rate of zeta")
    p.add_argument("--min-count", type=int, default=2,
                   help="occurrences a training word needs for its own id (rarer ones are <unk>)")
    p.add_argument("--record", default=None,
                   help="record name: benchmarks/records/NAME.json (default jrf_conll, quick: jrf_conll_quick)")


# -- data ------------------------------------------------------------------------------------------
def encode_tags(sents: list, names: list[str], width: int) -> Tensor:
    index = {t: i for i, t in enumerate(names)}
    y = torch.zeros(len(sents), width, dtype=torch.long)
    for i, s in enumerate(sents):
        y[i, : len(s)] = torch.tensor([index[t] for t in s.tags])
    return y


def prepare(train: list, test: list, *, dev: int, min_count: int = 2) -> dict[str, Any]:
    """Held-out development split (fixed), vocabulary, padded ids of every split."""
    perm = torch.randperm(len(train), generator=torch.Generator().manual_seed(DEV_SEED)).tolist()
    dev_s, pool_s = [train[i] for i in perm[:dev]], [train[i] for i in perm[dev:]]
    vocab = WordVocabulary(pool_s, min_count=min_count)
    names = tag_names(s.tags for s in train)
    width = max(len(s) for s in pool_s)

    def enc(sents: list) -> tuple[Tensor, Tensor]:
        (w,) = vocab.encode(sents, chars=False)
        return w, torch.tensor([len(s) for s in sents])

    pool_w, pool_n = enc(pool_s)
    pool_w = torch.nn.functional.pad(pool_w, (0, width - pool_w.shape[1]))
    return {"pool": (pool_w, encode_tags(pool_s, names, width), pool_n), "dev": (*enc(dev_s), [s.tags for s in dev_s]),
            "test": (*enc(test), [s.tags for s in test]), "names": names, "vocab_size": len(vocab.words),
            "max_length": width, "n_train": len(train)}


def split_labels(data: dict[str, Any], fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """Indices into the pool of the labelled and unlabelled sentences (seeded draw)."""
    n_pool = data["pool"][0].shape[0]
    n_lab = min(n_pool - 1, max(1, round(fraction * data["n_train"])))
    perm = torch.randperm(n_pool, generator=torch.Generator().manual_seed(seed))
    return perm[:n_lab].sort().values, perm[n_lab:].sort().values


def cut(words: Tensor, tags: Tensor | None, lengths: Tensor) -> tuple[Tensor, Tensor | None, Tensor]:
    t = int(lengths.max())
    return words[:, :t], None if tags is None else tags[:, :t], lengths


# -- training --------------------------------------------------------------------------------------
def make_jrf(data: dict[str, Any], lengths: Tensor, args: argparse.Namespace, seed: int) -> JRF:
    """The network of every method: length law = the pool's length counts + 0.5 (a length absent from
    the pool keeps some mass, else a noise draw of that length would be an impossible positive)."""
    L = data["max_length"]
    counts = torch.bincount(lengths, minlength=L + 1)[1:].double() + 0.5
    torch.manual_seed(seed)  # the same initial network for every method of a run
    return JRF(data["vocab_size"], len(data["names"]), max_length=L, length_probs=counts, embed=args.embed,
               hidden=args.hidden)


def dev_f1(model: JRF, data: dict[str, Any], split: str = "dev") -> dict[str, float]:
    words, lengths, gold = data[split]
    return evaluate_tagger(model.tagger, (words,), lengths, gold, data["names"])


def fit(model: JRF, objective: JRFObjective, stream: Callable[[torch.Generator], Any], data: dict[str, Any],
        args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """``args.steps`` Adam steps; keeps the checkpoint with the best development F1 (loaded at the end)."""
    g = torch.Generator().manual_seed(seed)
    theta = [p for n, p in model.named_parameters() if n != "log_z"]
    groups = [{"params": theta, "lr": args.lr}, {"params": [model.log_z], "lr": args.zeta_lr}]
    noise = list(objective.parameters())
    if noise:
        groups.append({"params": noise, "lr": args.lr})
    opt = torch.optim.Adam(groups)
    best, best_state, curve, last = -1.0, None, [], {}
    model.train()
    for step in range(1, args.steps + 1):
        out = objective(model, stream(g), generator=g)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(theta, 5.0)
        opt.step()
        last = out.metrics
        if step % args.eval_every == 0 or step == args.steps:
            f1 = dev_f1(model, data)["f1"]
            curve.append((step, f1))
            if f1 > best:
                best, best_state = f1, copy.deepcopy(model.state_dict())
    if not all(math.isfinite(float(v)) for v in last.values()):
        C.note(f"  non-finite metrics at the last step: {last}")
    assert best_state is not None
    model.load_state_dict(best_state)
    return {"dev_f1": best, "dev_curve": curve, "last_metrics": {k: float(v) for k, v in last.items()}}


def labelled_stream(words: Tensor, tags: Tensor, lengths: Tensor, batch: int) -> Callable[[torch.Generator], Any]:
    def draw(g: torch.Generator) -> Any:
        idx = torch.randint(words.shape[0], (batch,), generator=g)
        return cut(words[idx], tags[idx], lengths[idx])
    return draw


def mixed_stream(lab: tuple[Tensor, Tensor, Tensor], unl: tuple[Tensor, Tensor], batch: int) -> Callable:
    """A labelled batch and an unlabelled batch (tags -1) of ``batch`` sentences each, in one batch."""
    def draw(g: torch.Generator) -> Any:
        i = torch.randint(lab[0].shape[0], (batch,), generator=g)
        j = torch.randint(unl[0].shape[0], (batch,), generator=g)
        words = torch.cat([lab[0][i], unl[0][j]])
        tags = torch.cat([lab[1][i], torch.full_like(unl[0][j], -1)])
        return cut(words, tags, torch.cat([lab[2][i], unl[1][j]]))
    return draw


def pretrain_noise(data: dict[str, Any], unl: tuple[Tensor, Tensor], args: argparse.Namespace, seed: int) -> LSTMLM:
    torch.manual_seed(seed + 1)
    lm = LSTMLM(data["vocab_size"], embedding_dim=args.noise_hidden, hidden_size=args.noise_hidden, num_layers=1)
    pretrain_noise_lm(lm, Sequences(*unl), steps=args.noise_steps, batch_size=args.batch, lr=args.lr,
                      generator=torch.Generator().manual_seed(seed + 2))
    return lm


def init_zeta(model: JRF, noise: LSTMLM, unl: tuple[Tensor, Tensor], seed: int, n: int = 2000) -> None:
    """``zeta`` fitted to the noise (``ebms.fit.init_log_z``) on ``n`` unlabelled sentences
    drawn with ``seed``; see the module docstring."""
    idx = torch.randperm(unl[0].shape[0], generator=torch.Generator().manual_seed(seed))[:n]
    init_log_z(model, noise, Sequences(unl[0][idx], unl[1][idx]))


# -- the three methods -----------------------------------------------------------------------------
def run_supervised(data, lab, unl, args, seed) -> dict[str, Any]:
    model = make_jrf(data, torch.cat([lab[2], unl[1]]), args, seed)
    stats = fit(model, JRFObjective(None, alpha=0.0), labelled_stream(*lab, args.batch), data, args, seed)
    return {"model": model, "stats": stats, "config": {}}


def run_self_training(data, lab, unl, args, seed, threshold: float) -> dict[str, Any]:
    lengths = torch.cat([lab[2], unl[1]])
    runs: list[dict[str, Any]] = []

    def factory() -> JRF:
        return make_jrf(data, lengths, args, seed)

    def train(model: JRF, x: Sequences, y: Tensor) -> None:
        width = x.tokens.shape[1]
        runs.append(fit(model, JRFObjective(None, alpha=0.0),
                        labelled_stream(x.tokens, y[:, :width], x.lengths, args.batch), data, args,
                        seed + 10 * len(runs)))

    res = self_train(factory, train, (Sequences(lab[0], lab[2]), lab[1]), Sequences(*unl), rounds=args.rounds,
                     threshold=threshold, conditional=lambda m, x: m.crf(x),
                     score=lambda m: runs[-1]["dev_f1"])  # fit() has just scored this tagger
    stats = dict(runs[res.best_run], rounds=[{"added": int(r.added.numel()), "pool": r.pool} for r in res.rounds],
                 pseudo_labelled=int(res.pseudo_index.numel()), round_dev_f1=[r["dev_f1"] for r in runs],
                 best_run=res.best_run)
    return {"model": res.tagger, "stats": stats, "config": {"threshold": threshold}}


def run_jrf(data, lab, unl, args, seed, alpha: float) -> dict[str, Any]:
    model = make_jrf(data, torch.cat([lab[2], unl[1]]), args, seed)
    noise = pretrain_noise(data, unl, args, seed)
    init_zeta(model, noise, unl, seed)
    L = model.max_length
    objective = JRFObjective(noise, alpha=alpha, sample_options={"max_length": L + 1, "truncate": True})
    stats = fit(model, objective, mixed_stream(lab, unl, args.batch), data, args, seed)
    return {"model": model, "stats": stats, "config": {"alpha": alpha}}


def run_method(name: str, data, lab, unl, args, seed) -> dict[str, Any]:
    """Every candidate of one method, the best by development F1 scored on test."""
    if name == "supervised":
        cands: list[Callable[[], dict[str, Any]]] = [lambda: run_supervised(data, lab, unl, args, seed)]
    elif name == "self_training":
        cands = [lambda t=t: run_self_training(data, lab, unl, args, seed, t) for t in args.threshold_list]
    else:
        cands = [lambda a=a: run_jrf(data, lab, unl, args, seed, a) for a in args.alpha_list]
    w0, c0 = time.perf_counter(), time.process_time()
    tried = []
    best: dict[str, Any] | None = None
    for make in cands:
        t0 = time.perf_counter()
        r = make()
        r["seconds"] = time.perf_counter() - t0
        tried.append({"config": r["config"], "dev_f1": r["stats"]["dev_f1"], "seconds": r["seconds"]})
        C.note(f"    {name} {r['config']}: dev F1 {r['stats']['dev_f1']:.2f} ({r['seconds']:.0f} s)")
        if best is None or r["stats"]["dev_f1"] > best["stats"]["dev_f1"]:
            best = r
    assert best is not None
    test = dev_f1(best["model"], data, "test")
    return {"test": test, "dev_f1": best["stats"]["dev_f1"], "config": best["config"], "candidates": tried,
            "seconds_selected": best["seconds"], "seconds_all": time.perf_counter() - w0,
            "cpu_seconds_all": time.process_time() - c0,
            "stats": {k: v for k, v in best["stats"].items() if k != "dev_f1"}}


NOTES = ("Test-set conlleval figures (chunk F1, precision, recall in %; token accuracy in %) of the checkpoint "
         "and candidate with the best development F1; per fraction, per seed (each seed: its own label draw, "
         "network initialisation, batches and noise draws). Comparisons: ebms.metrics.compare_over_seeds, paired "
         "by seed, 95 % Student-t interval of the mean F1 difference. seconds: wall time of a method per seed "
         "(every candidate, noise pre-training included); cpu_seconds: its process CPU time. The published "
         "Table 5.3 anchor is in the record published_joint.")


def summarise(rs: list[dict[str, Any]], methods: list[str]) -> dict[str, Any]:
    """Means over the seeds of one fraction: test F1 and seconds per method, JRF's relative gains of the means."""
    out: dict[str, Any] = {}
    for m in methods:
        f1s = [r[m]["test"]["f1"] for r in rs]
        out[f"{m}_f1"] = sum(f1s) / len(f1s)
        out[f"{m}_f1_std"] = statistics.stdev(f1s) if len(f1s) > 1 else 0.0
        out[f"{m}_seconds"] = sum(r[m]["seconds_all"] for r in rs) / len(rs)
        out[f"{m}_cpu_seconds"] = sum(r[m]["cpu_seconds_all"] for r in rs) / len(rs)
    if "supervised" in methods and "jrf" in methods:
        sup, jrf = out["supervised_f1"], out["jrf_f1"]
        out["jrf_rel_gain_pct"] = 100 * (jrf - sup) / sup
        out["jrf_rel_error_reduction_pct"] = 100 * (jrf - sup) / max(100 - sup, 1e-9)
    out["seeds"] = len(rs)
    return out


def compare(rs: list[dict[str, Any]], methods: list[str]) -> dict[str, dict[str, Any]]:
    """Each semi-supervised method against the supervised CRF: test F1 paired by seed (``compare_over_seeds``)."""
    if "supervised" not in methods:
        return {}
    seeds = [r["seed"] for r in rs]
    sup = [r["supervised"]["test"]["f1"] for r in rs]
    names = {"jrf": "JRF", "self_training": "self-training"}
    return {f"{m}_vs_supervised": compare_over_seeds([r[m]["test"]["f1"] for r in rs], sup, seeds=seeds,
                                                     name_a=names[m], name_b="supervised CRF",
                                                     metric="test chunk F1", higher_is_better=True).to_dict()
            for m in ("jrf", "self_training") if m in methods}


def record_figures(data: dict[str, Any], results: dict[str, Any], summary: dict[str, Any],
                   comparisons: dict[str, Any], methods: list[str], n_train: int, n_test: int) -> dict[str, Any]:
    """The record's figures: data sizes, per-seed test figures of every method, means, comparisons."""
    runs: dict[str, Any] = {}
    for key, r in results.items():
        runs[key] = {"labelled": r["labelled"], "unlabelled": r["unlabelled"], "u_over_l": r["u_over_l"]}
        for m in methods:
            s = r[m]
            t = s["test"]
            runs[key][m] = {"test_f1": t["f1"], "test_precision": t["precision"], "test_recall": t["recall"],
                            "test_token_accuracy": t["accuracy"], "dev_f1": s["dev_f1"], "config": s["config"],
                            "seconds": s["seconds_all"], "cpu_seconds": s["cpu_seconds_all"],
                            **({"pseudo_labelled": s["stats"]["pseudo_labelled"], "best_run": s["stats"]["best_run"]}
                               if m == "self_training" else {})}
    return {"data": {"vocab_size": data["vocab_size"], "n_tags": len(data["names"]), "max_length": data["max_length"],
                     "train_sentences": n_train, "test_sentences": n_test},
            "runs": runs, "means": {k: v for k, v in summary.items() if isinstance(v, dict)},
            "comparisons": comparisons}


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    q = args.quick
    args.steps = args.steps or (40 if q else 1000)
    args.eval_every = args.eval_every or max(1, args.steps // (1 if q else 4))
    args.dev = args.dev if args.dev is not None else (60 if q else 500)
    args.rounds = args.rounds if args.rounds is not None else (1 if q else 2)
    args.noise_steps = args.noise_steps if args.noise_steps is not None else (20 if q else 200)
    args.alpha_list = floats(args.alphas or ("1.0" if q else "0.3,1.0"))
    args.threshold_list = floats(args.thresholds or ("0.9" if q else "0.9,0.99"))
    limit_train = args.limit_train or (400 if q else None)
    limit_test = args.limit_test or (150 if q else None)
    fractions, seeds = floats(args.fractions), [int(s) for s in args.seeds.split(",") if s.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            raise SystemExit(f"--methods: expected a subset of {', '.join(METHODS)}; got {m!r}")
    for f in fractions:
        if not 0 < f < 1:
            raise SystemExit(f"--fractions: expected values in (0, 1); got {f}")
    settings = {k: v for k, v in vars(args).items() if k not in ("no_save", "repeats", "record")}
    rec = Recorder(args.record or ("jrf_conll_quick" if q else "jrf_conll"), seeds=seeds,
                   settings={**settings, "fractions": fractions, "limit_train": limit_train, "limit_test": limit_test,
                             "dev_seed": DEV_SEED})
    summary: dict[str, Any] = {"bench": "jrf_conll", "quick": q}
    try:
        train, test = load_conll2000("train")[:limit_train], load_conll2000("test")[:limit_test]
    except FileNotFoundError as exc:
        C.note(f"skipping: CoNLL-2000 not found under the data root ($EBMS_DATA): {exc}")
        C.emit_final_line({**summary, "skipped": "CoNLL-2000 not found"})
        return
    data = prepare(train, test, dev=args.dev, min_count=args.min_count)
    record: dict[str, Any] = {"bench": "jrf_conll", "quick": q, "settings": settings, "dev_seed": DEV_SEED,
                              "selection": "checkpoint and candidate with the best development F1 (held-out "
                                           "training sentences); test scored once per method",
                              "vocab_size": data["vocab_size"], "n_tags": len(data["names"]),
                              "max_length": data["max_length"], "train_sentences": len(train),
                              "dev_sentences": args.dev, "test_sentences": len(test),
                              "machine": C.machine_info(), "published_table_5_3_chunking": PUBLISHED}
    results: dict[str, Any] = {}
    for f in fractions:
        for seed in seeds:
            il, iu = split_labels(data, f, seed)
            w, y, n = data["pool"]
            lab, unl = (w[il], y[il], n[il]), (w[iu], n[iu])
            key = f"{100 * f:g}%/seed{seed}"
            C.note(f"[{key}] {il.numel()} labelled, {iu.numel()} unlabelled sentences")
            res = {"fraction": f, "seed": seed, "labelled": int(il.numel()), "unlabelled": int(iu.numel()),
                   "u_over_l": iu.numel() / il.numel()}
            for m in methods:
                res[m] = run_method(m, data, lab, unl, args, seed)
            results[key] = res
    record["results"] = results
    rows, by_fraction = [], {}
    for key, r in results.items():
        for m in methods:
            s = r[m]
            rows.append([key, r["labelled"], f"{r['u_over_l']:.1f}", m, s["test"]["f1"], s["dev_f1"],
                         str(s["config"] or "-"), s["seconds_all"], s["cpu_seconds_all"]])
        by_fraction.setdefault(f"{100 * r['fraction']:g}%", []).append(r)
    print(C.format_table(["setting", "labelled", "U/L", "method", "test F1", "dev F1", "chosen on dev",
                          "wall s", "cpu s"], rows))
    for pct, rs in by_fraction.items():
        summary[pct] = summarise(rs, methods)
    print("published (Table 5.3, chunking, joint vs supervised, relative improvement %, 1B-word unlabelled, "
          "U/L 50-500): 2 % labelled " + "-".join(map(str, PUBLISHED["2%"])) + ", 10 % labelled "
          + "-".join(map(str, PUBLISHED["10%"])) + "; ours (relative F1 gain / relative error reduction): "
          + ", ".join(f"{p} {o.get('jrf_rel_gain_pct', float('nan')):.1f} / "
                      f"{o.get('jrf_rel_error_reduction_pct', float('nan')):.1f}" for p, o in summary.items()
                      if isinstance(o, dict)))
    comparisons = {pct: compare(rs, methods) for pct, rs in by_fraction.items()}
    for pct, cmps in comparisons.items():
        for c in cmps.values():
            print(f"{pct} labelled: {c['sentence']}")
    record["summary"] = summary
    path = C.save_results("jrf_conll_quick" if q else "jrf_conll", record, enabled=not args.no_save)
    if path is not None:
        C.note(f"saved {path}")
    rec.write(record_figures(data, results, summary, comparisons, methods, len(train), len(test)),
              notes=NOTES, enabled=not args.no_save)
    C.emit_final_line(summary)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
