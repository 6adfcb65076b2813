"""CRF transducer against aligned RNN-T and a linear-chain neural CRF, same budget.

Task: :func:`ebms.data.synthetic_tagging.lag_copy_tagging` (K = 4 tags, copy distance 3, 30 % copy
words, lengths 6-20, 2000 training and 500 test sentences, data seed 0): at a copy word the tag
equals the tag three positions back, so the answer needs label history beyond one step.

Models (identical transcription net F = SequenceEncoder + Linear -> K, same sizes; the two
transducers also share the prediction net G sizes):

* ``linear-chain``: F + a K x K transition matrix and start scores, exact conditional ML through
  :class:`ebms.structured.LinearChainCRF`, Viterbi decoding;
* ``rnnt``: aligned RNN-T (:class:`ebms.models.rnnt_aligned.AlignedRNNT`), ML by teacher forcing,
  beam-search decoding;
* ``crf-transducer``: :class:`ebms.models.crf_transducer.CRFTransducer` (design 1, raw
  potentials), beam search with early update for training and beam search for decoding.

Budget (same for all): ``--steps`` Adam steps (lr 3e-3) of batch 32, model seeds 0..``--seeds``-1.
Encoders: ``cnn`` (one convolution of width 3, so F sees one word either side and the copy
information must come through the labels) or ``bilstm`` (F sees the whole sentence).
Configurations (``--configs``, default the three synthetic ones): ``past-cnn`` and
``past-bilstm`` (copy from 3 back, CNN or BiLSTM encoder), ``future-cnn`` (copy from 3 ahead,
copy positions with their own tags, 8 tags), and ``conll2000-bilstm``: the first 2000 training
and 500 test sentences of CoNLL-2000 chunking, words only (lower-cased, train words seen twice
or more, the rest unknown), BIO-constrained decoding for all three models, chunk F1 by
:func:`ebms.metrics.chunking.conlleval`.
* ``crf-transducer-mc`` (only with ``--models``): the same CRF transducer trained by Monte Carlo
  instead, :class:`ebms.objectives.MonteCarloNLL` (``--mc-samples`` S samples per sentence from the
  model's own step-wise softmax, self-normalised importance weights; its own generator, seeded by
  the model seed, so the batch order is the other models'), beam search of the same width for
  decoding: the monograph's comparison of early updates with Monte Carlo training (section 4.4).

Reported: test tag accuracy, accuracy at copy positions, training seconds, mean +- std over
seeds, and the first-order ceiling of the task (see the data module). One process, one thread.

Comparisons: for every configuration, the CRF transducer against each of the other models run on
the same seeds (:func:`ebms.metrics.compare_over_seeds`, paired by model seed; test tag accuracy,
and chunk F1 on CoNLL-2000): the mean difference, its 95 % t interval and the verdict.

Run: ``python benchmarks/crf_transducer.py [--quick] [--configs past-cnn,...] [--steps N] [--seeds S] [--beam W]
[--models linear-chain,rnnt,crf-transducer,crf-transducer-mc] [--mc-samples S] [--mc-proposal model|uniform]``.
A full run (not ``--quick``, not ``--no-save``) writes the committed record
``benchmarks/records/<stem>.json`` (``crf_transducer`` for the three synthetic configurations,
``crf_transducer_<configs>`` otherwise; ``crf_transducer_mc`` for ``--models
crf-transducer,crf-transducer-mc --configs past-cnn``, ``crf_transducer_mc_<configs>`` for other
configurations with that row, then ``_s<S>`` unless ``--mc-samples 8``, ``_uniform`` for that
proposal and ``_steps<N>`` unless ``--steps 1000``): per-seed figures, means, standard deviations and the
comparisons.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from typing import Any

import _common as C
import torch
from _record import Recorder
from torch import Tensor, nn

from ebms.data.synthetic_tagging import SyntheticTagging, lag_copy_tagging
from ebms.metrics.chunking import conlleval
from ebms.metrics.seeds import compare_over_seeds
from ebms.models.crf_transducer import CRFTransducer
from ebms.models.rnnt_aligned import AlignedRNNT
from ebms.nets.transducer import TranscriptionNet
from ebms.objectives import BeamEarlyUpdate, MonteCarloNLL, TransducerML
from ebms.structured.linear_chain import LinearChainCRF, bio_allowed_transitions

MODELS = ("linear-chain", "rnnt", "crf-transducer")
ALL_MODELS = (*MODELS, "crf-transducer-mc")
SYNTHETIC = ("past-cnn", "past-bilstm", "future-cnn")
CONFIGS = (*SYNTHETIC, "conll2000-bilstm")
Masks = tuple[Tensor, Tensor] | None
BATCH, LR = 32, 3e-3
_SHOWN = {"linear-chain": "linear-chain CRF", "rnnt": "aligned RNN-T", "crf-transducer": "CRF transducer",
          "crf-transducer-mc": "CRF transducer by Monte Carlo"}
#: Monte Carlo training of the CRF transducer: samples per sentence and proposal (set by main)
MC: dict[str, Any] = {"n_samples": 8, "proposal": "model"}


class LinearChainTagger(nn.Module):
    """F + transitions, trained by exact conditional ML (the first-order baseline)."""

    def __init__(self, vocab: int, k: int, masks: Masks, **enc: Any) -> None:
        super().__init__()
        self.transcription = TranscriptionNet(vocab, k, **enc)
        self.transitions = nn.Parameter(torch.zeros(k, k))
        self.start = nn.Parameter(torch.zeros(k))
        self.masks = masks

    def crf(self, words: Tensor, lengths: Tensor) -> LinearChainCRF:
        a, s = self.masks if self.masks is not None else (None, None)
        return LinearChainCRF(self.transcription(words, lengths), self.transitions, lengths, start=self.start,
                              allowed=a, allowed_start=s)


def build(name: str, data: SyntheticTagging, enc: dict[str, Any], masks: Masks) -> nn.Module:
    if name == "linear-chain":
        return LinearChainTagger(data.vocab_size, data.n_tags, masks, **enc)
    cls = AlignedRNNT if name == "rnnt" else CRFTransducer
    a, s = masks if masks is not None else (None, None)
    return cls(data.vocab_size, data.n_tags, label_dim=16, label_hidden=32, allowed=a, allowed_start=s, **enc)


def conll_task(n_train: int = 2000, n_test: int = 500) -> tuple[SyntheticTagging, list[str]]:
    """The first sentences of CoNLL-2000 (words only, lower-cased, train words seen twice or more;
    0 = padding, 1 = unknown), tags normalised to IOB2 as conlleval reads them."""
    from ebms.data.conll import bio_to_spans, load_conll2000, spans_to_tags

    train, test = load_conll2000("train")[:n_train], load_conll2000("test")[:n_test]
    tag_seqs = [[spans_to_tags(bio_to_spans(s.tags), len(s)) for s in split] for split in (train, test)]
    names = sorted({t for split in tag_seqs for seq in split for t in seq}, key=lambda t: (t != "O", t))
    counts = Counter(w.lower() for s in train for w in s.words)
    vocab = {w: i + 2 for i, w in enumerate(sorted(w for w, c in counts.items() if c >= 2))}

    def pad(split: list[Any], seqs: list[list[str]]) -> tuple[Tensor, Tensor, Tensor]:
        t = max(len(s) for s in split)
        words = torch.zeros(len(split), t, dtype=torch.long)
        tags = torch.zeros(len(split), t, dtype=torch.long)
        for i, (s, y) in enumerate(zip(split, seqs)):
            words[i, : len(s)] = torch.tensor([vocab.get(w.lower(), 1) for w in s.words])
            tags[i, : len(s)] = torch.tensor([names.index(x) for x in y])
        return words, tags, torch.tensor([len(s) for s in split])

    data = SyntheticTagging(train=pad(train, tag_seqs[0]), test=pad(test, tag_seqs[1]), vocab_size=len(vocab) + 2,
                            n_tags=len(names), copy_words=(), first_order_ceiling=float("nan"),
                            settings={"data": "conll2000", "n_train": n_train, "n_test": n_test})
    return data, names


def loss_of(name: str, model: nn.Module, words: Tensor, tags: Tensor, lengths: Tensor, beam: int,
            generator: torch.Generator | None = None) -> tuple[Tensor, dict[str, float]]:
    if name == "linear-chain":
        return -model.crf(words, lengths).log_prob(tags).mean(), {}  # type: ignore[operator]
    if name == "rnnt":
        return TransducerML().compute(model, words, lengths, tags).loss, {}
    if name == "crf-transducer-mc":
        out = MonteCarloNLL(MC["n_samples"], MC["proposal"]).compute(model, words, lengths, tags, generator=generator)
        return out.loss, out.metrics
    return BeamEarlyUpdate(beam).compute(model, words, lengths, tags).loss, {}


@torch.no_grad()
def decode(name: str, model: nn.Module, words: Tensor, lengths: Tensor, beam: int) -> Tensor:
    model.eval()
    out = []
    for s in range(0, words.shape[0], 250):
        w, ln = words[s : s + 250], lengths[s : s + 250]
        if name == "linear-chain":
            out.append(model.crf(w, ln).argmax)  # type: ignore[operator]
        else:
            out.append(model.beam_search(w, ln, beam=beam)[0])  # type: ignore[operator]
    return torch.cat(out)


def train_one(name: str, data: SyntheticTagging, enc: dict[str, Any], *, seed: int, steps: int,
              beam: int, names: list[str] | None = None, masks: Masks = None) -> dict[str, float]:
    torch.manual_seed(seed)
    model = build(name, data, enc, masks)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    words, tags, lengths = data.train
    g = torch.Generator().manual_seed(seed)
    order, pos = torch.randperm(words.shape[0], generator=g), 0
    mc_gen = torch.Generator().manual_seed(10_000 + seed)  # Monte Carlo samples only: the batch order stays shared
    ess: list[float] = []
    model.train()
    t0 = time.perf_counter()
    for step in range(steps):
        if pos + BATCH > len(order):
            order, pos = torch.randperm(words.shape[0], generator=g), 0
        idx = order[pos : pos + BATCH]
        pos += BATCH
        ln = lengths[idx]
        t = int(ln.max())
        loss, info = loss_of(name, model, words[idx, :t], tags[idx, :t], ln, beam, mc_gen)
        if "ess" in info and step >= steps - 100:
            ess.append(info["ess"])
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
    seconds = time.perf_counter() - t0
    tw, tt, tl = data.test
    pred = decode(name, model, tw, tl, beam)
    valid = torch.arange(tw.shape[1]) < tl[:, None]
    right = pred == tt
    out = {"accuracy": 100.0 * float(right[valid].float().mean()), "copy_accuracy": float("nan"),
           "train_seconds": seconds, "final_loss": loss.item()}
    if ess:  # mean effective sample size of the importance weights over the last 100 steps
        out["final_ess"] = statistics.fmean(ess)
    if data.copy_words:
        out["copy_accuracy"] = 100.0 * float(right[valid & (tw >= data.copy_words[0])].float().mean())
    if names is not None:
        truth = [[names[i] for i in y[:n]] for y, n in zip(tt.tolist(), tl.tolist())]
        guess = [[names[i] for i in y[:n]] for y, n in zip(pred.tolist(), tl.tolist())]
        out["chunk_f1"] = conlleval(truth, guess).f1
    return out


def data_is_synthetic(config: str) -> bool:
    return not config.startswith("conll")


def summary(runs: list[dict[str, float]], key: str) -> dict[str, float]:
    xs = [r[key] for r in runs]
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0}


def run_config(config: str, *, steps: int, seeds: int, beam: int,
               models: tuple[str, ...] = MODELS) -> dict[str, Any]:
    direction, encoder = config.split("-")
    names: list[str] | None = None
    masks: Masks = None
    if direction == "conll2000":
        data, names = conll_task()
        masks = bio_allowed_transitions(names)
    else:
        data = lag_copy_tagging(n_train=2000, n_test=500, direction=direction, copy_tags=direction == "future",
                                seed=0)
    enc = {"embedding_dim": 32, "hidden": 64, "kind": encoder, "layers": 1}
    C.note(f"{config}: task {data.settings}; first-order ceiling {100 * data.first_order_ceiling:.2f}%"
           if data_is_synthetic(config) else f"{config}: task {data.settings}")
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in models}
    for seed in range(seeds):
        for name in models:  # the models alternate within each seed (same machine load)
            r = train_one(name, data, enc, seed=seed, steps=steps, beam=beam, names=names, masks=masks)
            runs[name].append(r)
            C.note(f"  seed {seed} {name:15s} acc {r['accuracy']:.2f} copy {r.get('copy_accuracy', math.nan):.2f} "
                   f"train {r['train_seconds']:.1f}s" + (f" chunk F1 {r['chunk_f1']:.2f}" if names else ""))
            if not data.copy_words:
                r.pop("copy_accuracy")
    keys = ("accuracy", "train_seconds", "chunk_f1") if names else ("accuracy", "copy_accuracy", "train_seconds")
    table = {m: {k: summary(runs[m], k) for k in keys} for m in models}
    rows = [[m, *(f"{table[m][k]['mean']:.2f} +- {table[m][k]['std']:.2f}" for k in keys)] for m in models]
    if data_is_synthetic(config):
        print(f"\n{config}: lag-copy tagging ({direction}, {data.n_tags} tags), encoder {encoder}; "
              f"first-order ceiling {100 * data.first_order_ceiling:.2f}%")
    else:
        print(f"\n{config}: {data.settings}, {data.n_tags} tags, BIO-constrained, encoder {encoder}")
    header = ["tag acc %", "train s", "chunk F1"] if names else ["tag acc %", "copy-position acc %", "train s"]
    print(C.format_table(["model", *header], rows))
    metrics = ("accuracy", "chunk_f1") if names else ("accuracy",)
    shown_metric = {"accuracy": "test tag accuracy (%)", "chunk_f1": "chunk F1 (%)"}
    others = [m for m in models if m != "crf-transducer"] if "crf-transducer" in models else []
    comparisons = {f"crf-transducer_vs_{other}_{key}": compare_over_seeds(
        [r[key] for r in runs["crf-transducer"]], [r[key] for r in runs[other]], seeds=list(range(seeds)),
        name_a="CRF transducer by early update" if other == "crf-transducer-mc" else "CRF transducer",
        name_b=_SHOWN[other], metric=shown_metric[key], higher_is_better=True).to_dict()
        for other in others for key in metrics}
    for cmp in comparisons.values():
        print(f"{config}: {cmp['sentence']}")
    ceiling = 100 * data.first_order_ceiling if data_is_synthetic(config) else None
    return {"task": data.settings, "encoder": encoder, "n_tags": data.n_tags,
            "first_order_ceiling": ceiling, "results": table, "runs": runs, "comparisons": comparisons}


def main() -> None:
    def extra(p: Any) -> None:
        p.add_argument("--configs", default=",".join(SYNTHETIC), help=f"comma list of {', '.join(CONFIGS)}")
        p.add_argument("--steps", type=int, default=None, help="Adam steps per model (default 1000, quick 60)")
        p.add_argument("--seeds", type=int, default=None, help="model seeds (default 3, quick 2)")
        p.add_argument("--beam", type=int, default=8, help="beam for early-update training and decoding")
        p.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(ALL_MODELS)}")
        p.add_argument("--mc-samples", type=int, default=8, help="samples per sentence of crf-transducer-mc")
        p.add_argument("--mc-proposal", default="model", help="proposal of crf-transducer-mc: model or uniform")

    args = C.parse_args("CRF transducer vs aligned RNN-T vs linear-chain CRF", extra)
    configs = [c for c in args.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            raise SystemExit(f"--configs: expected names from {', '.join(CONFIGS)}; got {c!r}")
    models = tuple(m for m in args.models.split(",") if m)
    for m in models:
        if m not in ALL_MODELS:
            raise SystemExit(f"--models: expected names from {', '.join(ALL_MODELS)}; got {m!r}")
    if not models or len(set(models)) != len(models):
        raise SystemExit(f"--models: expected distinct names from {', '.join(ALL_MODELS)}; got {args.models!r}")
    if args.mc_samples < 1:
        raise SystemExit(f"--mc-samples: expected an int >= 1; got {args.mc_samples}")
    if args.mc_proposal not in ("model", "uniform"):
        raise SystemExit(f"--mc-proposal: expected model or uniform; got {args.mc_proposal!r}")
    MC.update(n_samples=args.mc_samples, proposal=args.mc_proposal)
    steps = args.steps or (60 if args.quick else 1000)
    seeds = args.seeds or (2 if args.quick else 3)
    stem = "crf_transducer" if set(configs) == set(SYNTHETIC) else "crf_transducer_" + "_".join(configs)
    if "crf-transducer-mc" in models:
        stem = "crf_transducer_mc" + ("" if configs == ["past-cnn"] else "_" + "_".join(configs))
        stem += "" if args.mc_samples == 8 else f"_s{args.mc_samples}"
        stem += "" if args.mc_proposal == "model" else f"_{args.mc_proposal}"
        stem += "" if steps == 1000 else f"_steps{steps}"
    rec = Recorder(stem, seeds=list(range(seeds)), settings={
        "configs": configs, "steps": steps, "batch": BATCH, "lr": LR, "beam": args.beam, "quick": args.quick,
        "sizes": {"embedding_dim": 32, "hidden": 64, "layers": 1, "label_dim": 16, "label_hidden": 32},
        "synthetic_task": {"n_train": 2000, "n_test": 500, "data_seed": 0, "lag": 3, "classes": 4},
        "clip_grad_norm": 5.0, "models": list(models),
        **({"mc_samples": args.mc_samples, "mc_proposal": args.mc_proposal} if "crf-transducer-mc" in models else {})})
    print(f"budget per model: {steps} Adam steps (lr {LR}) x batch {BATCH}, beam {args.beam}, seeds 0..{seeds - 1}")
    t0 = time.perf_counter()
    results = {c: run_config(c, steps=steps, seeds=seeds, beam=args.beam, models=models) for c in configs}
    record = {"bench": "crf_transducer", "steps": steps, "batch": BATCH, "lr": LR, "beam": args.beam,
              "seeds": seeds, "configs": results, "wall_seconds": time.perf_counter() - t0,
              "machine": C.machine_info()}
    C.save_results(f"quick/{stem}" if args.quick else stem, record, enabled=not args.no_save)
    rec.write({c: {k: v for k, v in r.items()} for c, r in results.items()}, enabled=not (args.quick or args.no_save),
              notes=("Test tag accuracy and accuracy at copy positions in %, chunk F1 by conlleval (CoNLL-2000); "
                     "mean and sample std over model seeds; runs: every seed's figures (train_seconds: wall "
                     "seconds of the training loop on a shared 2-core machine, one thread: load-dependent). "
                     "comparisons: compare_over_seeds, CRF transducer minus the other model, paired by seed, "
                     "95 % t interval; 'words' is the verdict. first_order_ceiling: the best accuracy a "
                     "first-order chain can reach on the synthetic task (None for CoNLL-2000). final_ess "
                     "(crf-transducer-mc): mean effective sample size of the importance weights over the last "
                     "100 training steps, out of mc_samples."))
    final: dict[str, Any] = {"bench": "crf_transducer", "steps": steps, "seeds": seeds, "beam": args.beam}
    for c, r in results.items():
        if data_is_synthetic(c):
            final[f"{c}_ceiling"] = round(r["first_order_ceiling"], 2)
        for m in models:
            acc = r["results"][m]["accuracy"]
            final[f"{c}_{m}_acc"] = f"{acc['mean']:.2f}+-{acc['std']:.2f}"
            final[f"{c}_{m}_train_s"] = round(r["results"][m]["train_seconds"]["mean"], 1)
            if "chunk_f1" in r["results"][m]:
                f1 = r["results"][m]["chunk_f1"]
                final[f"{c}_{m}_chunk_f1"] = f"{f1['mean']:.2f}+-{f1['std']:.2f}"
    C.emit_final_line(final)


if __name__ == "__main__":
    main()
