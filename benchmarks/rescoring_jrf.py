"""WER of KN, LSTM, TRF (no POS) and JRF (with POS tags) rescoring on SIMULATED n-best lists from CoNLL-2000 text.

The monograph (§5.3, the experiments of Song et al. 2020, "[163]") trains on the WSJ part of PTB a KN n-gram, an
LSTM LM, a TRF LM without POS and a JRF LM with POS tags, rescores 1000-best lists of WSJ'92 with each, and reports
that the JRF gives the lowest WER (our source gives no numbers). Here, at CPU scale:

    text        CoNLL-2000 (WSJ sections 15-18 train, 20 test; ``$EBMS_DATA``), words lower-cased, digits -> ``0``;
                a word seen fewer than ``--min-count`` times in training is ``<unk>``. The POS column (44 tags) is the
                JRF's labels. A fixed draw (seed ``DEV_SEED``) holds ``--sentences`` training sentences out as the
                development set (they train nothing); the test set is the first ``--sentences`` test sentences.
    n-best      ``simulate_nbest`` (``ebms.metrics.rescoring``; CMU-dictionary phonetic confusions, noise 3.0; **a
                test bed, not ASR**) of the dev sentences (seed ``2 s``) and of the test sentences (seed ``2 s + 1``)
                for run seed ``s``, at most ``--n`` distinct hypotheses each, lexicon = the training vocabulary.
    LMs         ``kn``: ``BackoffNGram`` order ``--order``, interpolated modified Kneser-Ney. ``lstm``: ``LSTMLM``
                (``--hidden`` wide, one layer) trained by likelihood ``--lstm-steps`` Adam steps of ``--batch``
                sentences (``ebms.fit.pretrain_noise_lm``). ``trf``: a JRF with ONE tag (so the CRF term is zero
                and its marginal is a BiLSTM TRF: no POS), ``jrf``: the JRF with the 44 POS tags; both the same
                network (embedding ``--embed``, BiLSTM ``--hidden`` per direction), both trained ``--steps`` Adam steps
                by ``JRFObjective`` (monograph Eq. 5.11, alpha 1) on batches of ``--batch`` tagged + ``--batch``
                untagged training sentences (the same draws for both), with the noise LM a copy of the ``lstm``
                above trained on by DNCE; ``zeta`` initialised by ``ebms.fit.init_log_z`` and learned at
                ``--zeta-lr``. Each TRF/JRF is scored twice: ``log pi_l - E(x) - zeta_l`` with the training zeta,
                and with ``log Z_l`` re-estimated by importance sampling (``importance_log_z_per_length``,
                ``--logz-samples`` draws per length from the model's own noise LM made length-conditional, for
                every length a hypothesis has). Hypotheses longer than the model's L get a floor score of -1e4
                (counted in the record).
    rescoring   ``acoustic + lambda log p_LM + beta |h|``, (lambda, beta) tuned on dev per LM and seed (lambda in
                {0, 0.05, ..., 2}, beta in {-2, -1.5, ..., 12}); test WER.
    intervals   per seed, the utterance-level paired bootstrap (``paired_bootstrap``, ``--samples`` replicates) of
                the JRF (re-estimated log Z) against each other LM, and of the JRF against the TRF both with their
                training zeta (``PAIRS``); over seeds, ``compare_over_seeds`` of the
                per-seed test WERs (Student t, paired by seed: the same n-best lists and the same LSTM noise start),
                and the paired bootstrap over the utterances of all seeds pooled. The verdict follows the over-seeds
                interval ("not significant" when it covers 0).

The record (``benchmarks/records/rescoring_jrf.json``; ``rescoring_jrf_quick`` with ``--quick``) is rewritten after
every seed, so a run stopped early leaves the seeds it finished. ``--quick``: 400 training sentences, 40 dev and
test sentences, 8 hypotheses, 20 steps, one seed (smoke scale: the figures mean nothing).

Run: ``python benchmarks/rescoring_jrf.py [--quick] [--seeds 0,1,2] [--steps N] [--sentences N] [--n N]``.
"""

from __future__ import annotations

import argparse
import copy
import time
from collections import Counter
from typing import Any

import _common as C
import torch
from _record import Recorder
from torch import Tensor

from ebms.data.conll import load_conll2000
from ebms.distributions import BackoffNGram
from ebms.estimators import importance_log_z_per_length
from ebms.estimators.sequence_log_z import LengthConditionalLM
from ebms.fit import init_log_z, pretrain_noise_lm
from ebms.metrics.rescoring import (
    cmu_pronunciations,
    evaluate_rescoring,
    hypothesis_errors,
    lm_scores,
    paired_bootstrap,
    simulate_nbest,
    tune_weights,
)
from ebms.metrics.seeds import compare_over_seeds
from ebms.models.jrf import JRF
from ebms.models.lm import LSTMLM
from ebms.objectives.jrf import JRFObjective
from ebms.sequences import Sequences

BENCH = "rescoring_jrf"
DEV_SEED = 12345
LAMBDAS = [0.05 * k for k in range(41)]
BETAS = [0.5 * k for k in range(-4, 25)]
FLOOR = -1e4
#: the comparisons (a, b), each reported as WER(a) - WER(b): the JRF with re-estimated log Z against every
#: comparator, and the JRF against the TRF both with their training zeta.
MAIN = "jrf (re-estimated)"
PAIRS = ((MAIN, "kn"), (MAIN, "lstm"), (MAIN, "trf (re-estimated)"), ("jrf (training zeta)", "trf (training zeta)"),
         (MAIN, "jrf (training zeta)"))


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", default="0", help="comma-separated run seeds (training draws and the n-best simulation)")
    p.add_argument("--steps", type=int, default=None, help="JRF / TRF Adam steps (default 300; quick 20)")
    p.add_argument("--lstm-steps", type=int, default=None, help="LSTM likelihood steps (default 600; quick 20)")
    p.add_argument("--batch", type=int, default=16, help="sentences per step (JRF/TRF: as many tagged + untagged)")
    p.add_argument("--lr", type=float, default=5e-3, help="Adam learning rate of the networks")
    p.add_argument("--zeta-lr", type=float, default=0.05, help="Adam learning rate of zeta")
    p.add_argument("--embed", type=int, default=64, help="word embedding width of the JRF / TRF")
    p.add_argument("--hidden", type=int, default=64, help="BiLSTM units per direction; the LSTM LM's width")
    p.add_argument("--order", type=int, default=4, help="KN n-gram order")
    p.add_argument("--min-count", type=int, default=8, help="training occurrences a word needs for its own id")
    p.add_argument("--sentences", type=int, default=None, help="dev and test sentences each (default 200; quick 40)")
    p.add_argument("--n", type=int, default=None, help="hypotheses per utterance (default 20; quick 8)")
    p.add_argument("--logz-samples", type=int, default=None, help="IS draws per length (default 50; quick 4)")
    p.add_argument("--samples", type=int, default=1000, help="bootstrap replicates")
    p.add_argument("--limit-train", type=int, default=None, help="the first N training sentences (quick 400)")
    p.add_argument("--record", default=None, help="record name (default rescoring_jrf; quick rescoring_jrf_quick)")


# -- text ----------------------------------------------------------------------------------------------
def normalise(word: str) -> str:
    return "".join("0" if c.isdigit() else c for c in word.lower())


class Words:
    """Ids ``0`` boundary, ``1`` ``<unk>``, then the training words seen ``min_count`` times (by count)."""

    def __init__(self, sentences: list[list[str]], min_count: int) -> None:
        counts = Counter(w for s in sentences for w in s)
        kept = sorted((w for w, n in counts.items() if n >= min_count and w != "<unk>"), key=lambda w: (-counts[w], w))
        self.words = ["</s>", "<unk>", *kept]
        self.index = {w: i for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    def known(self, sentence: list[str]) -> list[str]:
        return [w if w in self.index else "<unk>" for w in sentence]

    def ids(self, sentences: list[list[str]]) -> Sequences:
        return Sequences.from_lists([[self.index.get(w, 1) for w in s] for s in sentences])


def load(args: argparse.Namespace) -> dict[str, Any]:
    train, test = load_conll2000("train"), load_conll2000("test")
    perm = torch.randperm(len(train), generator=torch.Generator().manual_seed(DEV_SEED)).tolist()
    n = args.sentences
    dev_s, pool = [train[i] for i in perm[:n]], [train[i] for i in perm[n:]]
    if args.limit_train is not None:
        pool = pool[: args.limit_train]
    pool_words = [[normalise(w) for w in s.words] for s in pool]
    vocab = Words(pool_words, args.min_count)
    tags = sorted({t for s in pool for t in s.column("pos")})
    tag_index = {t: i for i, t in enumerate(tags)}
    x = vocab.ids(pool_words)
    y = torch.zeros_like(x.tokens)
    for i, s in enumerate(pool):
        y[i, : len(s)] = torch.tensor([tag_index[t] for t in s.column("pos")])
    refs = {name: [vocab.known([normalise(w) for w in s.words]) for s in sents]
            for name, sents in (("dev", dev_s), ("test", test[:n]))}
    return {"vocab": vocab, "tags": tags, "x": x, "y": y, "refs": refs, "n_pool": len(pool)}


# -- training ------------------------------------------------------------------------------------------
def stream(x: Sequences, y: Tensor, batch: int) -> Any:
    """``batch`` tagged + ``batch`` untagged (tags -1) rows drawn with replacement, trimmed to the longest."""
    def draw(g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        rows = torch.randint(x.batch_size, (2 * batch,), generator=g)
        lengths = x.lengths[rows]
        t = int(lengths.max())
        tags = y[rows, :t].clone()
        tags[batch:] = -1
        return x.tokens[rows, :t], tags, lengths
    return draw


def train_lstm(data: dict[str, Any], args: argparse.Namespace, seed: int) -> tuple[LSTMLM, float]:
    t0 = time.process_time()
    torch.manual_seed(seed + 1)
    lm = LSTMLM(len(data["vocab"]), embedding_dim=args.hidden, hidden_size=args.hidden, num_layers=1)
    pretrain_noise_lm(lm, data["x"], steps=args.lstm_steps, batch_size=args.batch, lr=args.lr,
                      generator=torch.Generator().manual_seed(seed + 2))
    return lm.eval(), time.process_time() - t0


def train_field(data: dict[str, Any], lstm: LSTMLM, n_tags: int, args: argparse.Namespace, seed: int
                ) -> tuple[JRF, LSTMLM, dict[str, Any]]:
    """A JRF with ``n_tags`` tags (1: a TRF without POS) trained by JRFObjective from a copy of ``lstm`` as noise."""
    t0 = time.process_time()
    x = data["x"]
    L = int(x.lengths.max())
    counts = torch.bincount(x.lengths, minlength=L + 1)[1:].double() + 0.5
    torch.manual_seed(seed)
    model = JRF(len(data["vocab"]), n_tags, max_length=L, length_probs=counts, embed=args.embed, hidden=args.hidden)
    noise = copy.deepcopy(lstm).train()
    g = torch.Generator().manual_seed(seed + 3)
    pick = torch.randperm(x.batch_size, generator=g)[:2000]
    init_log_z(model, noise, x[pick])
    objective = JRFObjective(noise, alpha=1.0, sample_options={"max_length": L + 1, "truncate": True})
    theta = [p for n, p in model.named_parameters() if n != "log_z"]
    opt = torch.optim.Adam([{"params": theta, "lr": args.lr}, {"params": [model.log_z], "lr": args.zeta_lr},
                            {"params": list(objective.parameters()), "lr": args.lr}])
    y = data["y"] if n_tags > 1 else torch.zeros_like(data["y"])
    draw = stream(x, y, args.batch)
    g = torch.Generator().manual_seed(seed + 4)  # the same batches for the JRF and the TRF of a seed
    model.train()
    last: dict[str, float] = {}
    for _ in range(args.steps):
        out = objective(model, draw(g), generator=g)
        opt.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_([*theta, *objective.parameters()], 5.0)
        opt.step()
        last = {k: float(v) for k, v in out.metrics.items() if k in ("sup_nll", "nce", "nce_accuracy", "noise_ppl")}
    return model.eval(), noise.eval(), {"train_cpu_s": time.process_time() - t0, "last_metrics": last}


# -- scoring -------------------------------------------------------------------------------------------
def field_scorer(model: JRF, vocab: Words, log_z: Tensor) -> Any:
    """``log pi_l - E(x) - log_z[l - 1]`` of word lists (FLOOR outside lengths 1..L), for ``lm_scores``."""
    def call(batch: list[list[str]]) -> Tensor:
        out = torch.full((len(batch),), FLOOR, dtype=torch.float64)
        ok = [i for i, h in enumerate(batch) if 1 <= len(h) <= model.max_length]
        if ok:
            x = vocab.ids([batch[i] for i in ok])
            with torch.no_grad():
                e = model.energy(x).double()
            li = x.lengths - 1
            out[ok] = model.log_pi[li].double() - e - log_z.double()[li]
        return out
    return call


def lm_scorer(lm: Any, vocab: Words) -> Any:
    def call(batch: list[list[str]]) -> Tensor:
        with torch.no_grad():
            return lm.log_prob(vocab.ids(batch)).double()
    return call


def reestimate(model: JRF, noise: LSTMLM, lengths: list[int], n: int, seed: int) -> tuple[Tensor, dict[str, Any]]:
    """``log Z_l`` by importance sampling from the length-conditional noise LM at ``lengths`` (zeta elsewhere)."""
    g = torch.Generator().manual_seed(seed + 5)
    t0 = time.process_time()
    with torch.no_grad():
        est = importance_log_z_per_length(model, LengthConditionalLM(noise.eval()), n, lengths=lengths, generator=g,
                                          batch_size=512)
    log_z = model.log_normalisers().detach().double().clone()
    ess = []
    for length, e in zip(est.lengths, est.estimates):
        log_z[length - 1] = float(e.estimate)
        ess.append(float(e.ess or 0.0))
    shift = (log_z - model.log_normalisers().detach().double())[[k - 1 for k in lengths]]
    return log_z, {"reestimate_cpu_s": time.process_time() - t0, "ess_median": float(torch.tensor(ess).median()),
                   "ess_min": min(ess), "reestimated_minus_zeta_mean": float(shift.mean())}


def run_seed(data: dict[str, Any], args: argparse.Namespace, seed: int, pron: dict[str, Any]) -> dict[str, Any]:
    vocab = data["vocab"]
    lexicon = vocab.words[2:]
    sets = {name: simulate_nbest(data["refs"][name], n=args.n, seed=2 * seed + k, lexicon=lexicon,
                                 pronunciations=pron, prefix=f"{name}-")
            for k, name in enumerate(("dev", "test"))}
    (dev, dev_refs), (tst, test_refs) = sets["dev"], sets["test"]
    C.note(f"[{BENCH}] seed {seed}: simulated n-best: dev {dev}, test {tst}")
    info: dict[str, Any] = {}
    scorers: dict[str, Any] = {}
    t0 = time.process_time()
    kn = BackoffNGram.fit(data["x"], len(vocab), order=args.order)
    info["kn"] = {"train_cpu_s": time.process_time() - t0}
    scorers["kn"] = lm_scorer(kn, vocab)
    lstm, secs = train_lstm(data, args, seed)
    info["lstm"] = {"train_cpu_s": secs}
    scorers["lstm"] = lm_scorer(lstm, vocab)
    C.note(f"[{BENCH}] seed {seed}: lstm trained ({secs:.0f} CPU s)")
    lengths = sorted({len(h) for nb in (dev, tst) for h in nb.hypotheses})
    for name, k in (("trf", 1), ("jrf", len(data["tags"]))):
        model, noise, rec = train_field(data, lstm, k, args, seed)
        inside = [n for n in lengths if 1 <= n <= model.max_length]
        log_z, est = reestimate(model, noise, inside, args.logz_samples, seed)
        rec.update(est, n_tags=k, floored_hypotheses=sum(1 for nb in (dev, tst) for h in nb.hypotheses
                                                         if not 1 <= len(h) <= model.max_length))
        info[name] = rec
        scorers[f"{name} (training zeta)"] = field_scorer(model, vocab, model.log_normalisers().detach())
        scorers[f"{name} (re-estimated)"] = field_scorer(model, vocab, log_z)
        C.note(f"[{BENCH}] seed {seed}: {name} trained ({rec['train_cpu_s']:.0f} CPU s, {rec['last_metrics']}); log Z "
               f"re-estimated ({est['reestimate_cpu_s']:.0f} CPU s, ESS median {est['ess_median']:.1f})")
    dev_err, test_err = hypothesis_errors(dev, dev_refs), hypothesis_errors(tst, test_refs)
    gen = torch.Generator().manual_seed(seed)
    systems: dict[str, Any] = {}
    errors: dict[str, Tensor] = {}
    first = None
    for name, fn in scorers.items():
        s_dev, s_test = lm_scores(dev, fn), lm_scores(tst, fn)
        tuned = tune_weights(dev, dev_refs, s_dev, lm_weights=LAMBDAS, length_penalties=BETAS, errors=dev_err)
        res = evaluate_rescoring(tst, test_refs, s_test, lm_weight=tuned.lm_weight,
                                 length_penalty=tuned.length_penalty, samples=args.samples, generator=gen,
                                 errors=test_err)
        first = first or res
        errors[name] = res.rescored_errors
        systems[name] = {"test_wer": res.rescored.percent, "dev_wer": 100 * tuned.wer, "lambda": tuned.lm_weight,
                         "beta": tuned.length_penalty,
                         "test_interval": [100 * res.rescored_interval.low, 100 * res.rescored_interval.high]}
        C.note(f"[{BENCH}] seed {seed}: {name}: test WER {res.rescored.percent:.2f} (dev {100 * tuned.wer:.2f}, "
               f"lambda {tuned.lm_weight:.2f}, beta {tuned.length_penalty:+.1f})")
    assert first is not None
    pairs = {}
    for a, b in PAIRS:
        p = paired_bootstrap(errors[b], errors[a], first.ref_lengths, samples=args.samples, generator=gen)
        pairs[f"{a} - {b}"] = {"delta": 100 * p.delta, "low": 100 * p.low, "high": 100 * p.high, "poi": p.poi}
    return {"seed": seed, "first_pass_wer": first.first_pass.percent, "oracle_wer": first.oracle.percent,
            "test_utterances": tst.num_utterances, "test_hypotheses": len(tst), "dev_hypotheses": len(dev),
            "systems": systems, "paired": pairs, "models": info,
            "_errors": errors, "_ref": first.ref_lengths}


def words(low: float, high: float, a: str, b: str) -> str:
    """The verdict on an interval of WER(a) - WER(b): "not significant" when it covers 0."""
    if low <= 0.0 <= high:
        return "not significant"
    return f"{a} fewer errors than {b}" if high < 0 else f"{a} more errors than {b}"


def summarise(runs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    names = list(runs[0]["systems"])
    seeds = [r["seed"] for r in runs]
    mean = {k: sum(r["systems"][k]["test_wer"] for r in runs) / len(runs) for k in names}
    out: dict[str, Any] = {"mean_test_wer": mean,
                           "mean_first_pass_wer": sum(r["first_pass_wer"] for r in runs) / len(runs),
                           "mean_oracle_wer": sum(r["oracle_wer"] for r in runs) / len(runs), "over_seeds": {},
                           "pooled": {}}
    ref = torch.cat([r["_ref"] for r in runs])
    gen = torch.Generator().manual_seed(99)
    for a, b in PAIRS:
        key = f"{a} - {b}"
        if len(runs) > 1:
            cmp = compare_over_seeds([r["systems"][a]["test_wer"] for r in runs],
                                     [r["systems"][b]["test_wer"] for r in runs], seeds=seeds, name_a=a, name_b=b,
                                     metric="test WER (%)", higher_is_better=False)
            d = cmp.to_dict()
            d["words"] = words(cmp.ci_low, cmp.ci_high, a, b)
            out["over_seeds"][key] = d
        p = paired_bootstrap(torch.cat([r["_errors"][b] for r in runs]), torch.cat([r["_errors"][a] for r in runs]),
                             ref, samples=args.samples, generator=gen)
        out["pooled"][key] = {"delta": 100 * p.delta, "low": 100 * p.low, "high": 100 * p.high, "poi": p.poi,
                              "words": words(100 * p.low, 100 * p.high, a, b)}
    return out


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    q = args.quick
    args.steps = args.steps or (20 if q else 300)
    args.lstm_steps = args.lstm_steps or (20 if q else 600)
    args.sentences = args.sentences or (40 if q else 200)
    args.n = args.n or (8 if q else 20)
    args.logz_samples = args.logz_samples or (4 if q else 50)
    if q and args.limit_train is None:
        args.limit_train = 400
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    settings = {k: v for k, v in vars(args).items() if k not in ("no_save", "record", "repeats")}
    rec = Recorder(args.record or (BENCH + "_quick" if q else BENCH), seeds=seeds, settings=settings)
    data = load(args)
    vocab = data["vocab"]
    pron = cmu_pronunciations({*vocab.words[2:], *(w for s in data["refs"].values() for x in s for w in x)})
    C.note(f"[{BENCH}] {data['n_pool']} training sentences, V = {len(vocab)}, {len(data['tags'])} POS tags, "
           f"L = {int(data['x'].lengths.max())}; dev / test {args.sentences} sentences")
    runs: list[dict[str, Any]] = []
    for seed in seeds:
        runs.append(run_seed(data, args, seed, pron))
        summary = summarise(runs, args)
        figures = {"data": {"train_sentences": data["n_pool"], "vocab_size": len(vocab), "pos_tags": len(data["tags"]),
                            "max_length": int(data["x"].lengths.max()), "dev_sentences": args.sentences,
                            "test_sentences": args.sentences},
                   "seeds_done": [r["seed"] for r in runs],
                   "per_seed": [{k: v for k, v in r.items() if not k.startswith("_")} for r in runs],
                   "summary": summary}
        rec.seeds = [r["seed"] for r in runs]
        path = rec.write(figures, enabled=not args.no_save, notes=(
            "SIMULATED n-best lists from CoNLL-2000 sentences (dev: held-out training sentences; test: test "
            "sentences), not ASR. WER in percent; lambda and beta tuned on dev per LM and seed. jrf: a JRF with the "
            "44 POS tags; trf: the same network with one tag (no POS); both trained by JRFObjective (alpha 1) from a "
            "copy of the lstm as the DNCE noise. '(training zeta)': the DNCE-learned zeta; '(re-estimated)': log Z_l "
            "by importance sampling from the model's own noise LM. paired / over_seeds / pooled, key 'a - b': "
            "WER(a) - WER(b) (negative: a has fewer errors); per seed (paired) and pooled over seeds: "
            "utterance-level paired bootstrap; over_seeds: compare_over_seeds (Student t over the seeds)."))
        if path is not None:
            C.note(f"[{BENCH}] wrote {path} ({len(runs)} seeds)")
    summary = summarise(runs, args)
    rows = [[k, v, runs[0]["systems"][k]["lambda"]] for k, v in summary["mean_test_wer"].items()]
    print(C.format_table(["system", "mean test WER", "lambda (seed 0)"], rows))
    for other, p in summary["pooled"].items():
        s = summary["over_seeds"].get(other)
        seed_part = f"; over seeds {s['mean_diff']:+.2f} [{s['ci_low']:+.2f}, {s['ci_high']:+.2f}] {s['words']}" if s else ""
        print(f"{other}: pooled {p['delta']:+.2f} [{p['low']:+.2f}, {p['high']:+.2f}] {p['words']}{seed_part}")
    C.emit_final_line({"bench": BENCH, "quick": q, **{k.replace(" ", "_"): round(v, 3)
                                                      for k, v in summary["mean_test_wer"].items()}})


if __name__ == "__main__":
    main()
