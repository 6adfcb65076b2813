"""N-best rescoring on a SIMULATED n-best set from PTB: first pass, oracle, unigram and bigram LMs.

Run:  python examples/rescoring.py [--sentences 200] [--n 10] [--seed 0]   (about ten seconds)
      python examples/rescoring.py --sentences 0                         (all of PTB valid/test)

The n-best lists are made from PTB valid (dev) and test sentences by a simulated acoustic channel
(phonetic confusions from the CMU pronouncing dictionary, deletions, insertions, noisy acoustic
scores; see ebms.metrics.rescoring.simulate_nbest). They are a test bed for the harness, not a
claim about speech recognition. The script writes them in Kaldi form (text, ac_cost, lm_cost)
and as TSV under runs/examples/rescoring/, reads them back, counts a unigram and an interpolated
absolute-discounting bigram LM on PTB train, tunes (lm_weight, length_penalty) on dev, and prints
test WERs with 95% bootstrap intervals and a final JSON line. Without PTB (under $EBMS_DATA) it
falls back to a dozen built-in sentences. ``--record NAME`` also writes that JSON line's figures as
the committed record ``benchmarks/records/NAME.json`` (``benchmarks/_record.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

from ebms.data.nbest import (
    NBest,
    read_kaldi_nbest,
    read_nbest_tsv,
    read_references,
    write_kaldi_nbest,
    write_nbest_tsv,
    write_references,
)
from ebms.data.text import Vocabulary, ptb
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

FALLBACK = ["the cat sat on the mat", "a dog ran to the park", "the market fell sharply today",
            "investors sold their shares", "the company said it would buy the firm", "prices rose in new york",
            "the bank cut its rate", "he said the deal was off", "sales rose two percent", "the board met on friday",
            "stocks closed higher", "the dollar fell against the yen"]


class CountedBigram:
    """Interpolated absolute-discounting bigram (order 2) or add-one unigram (order 1) over token ids.

    ``p(w | v) = max(c(v, w) - D, 0) / c(v) + D N1+(v .) / c(v) * p1(w)`` with
    ``p1(w) = (c(w) + 1) / (N + V)`` and ``D = n1 / (n1 + 2 n2)`` (Ney, Essen, Kneser, 1994); id 0 is
    ``<s>`` in histories and ``</s>`` as an outcome. ``log_prob(Sequences) -> (B,)`` includes ``</s>``.
    """

    def __init__(self, stream: Tensor, vocab_size: int, order: int = 2) -> None:
        v = self.vocab_size = vocab_size
        self.order = order
        prev = torch.cat([torch.zeros(1, dtype=torch.long), stream[:-1]])
        uni = torch.bincount(stream, minlength=v).double()
        self.log_p1 = ((uni + 1) / (uni.sum() + v)).log()
        self.keys, counts = torch.unique(prev * v + stream, return_counts=True)
        self.counts = counts.double()
        n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
        self.discount = n1 / (n1 + 2 * n2)
        self.context = torch.bincount(prev, minlength=v).double()
        self.followers = torch.bincount(self.keys // v, minlength=v).double()

    def log_prob(self, batch: Sequences) -> Tensor:
        tokens, lengths = batch.tokens, batch.lengths
        b, t = tokens.shape
        pos = torch.arange(t + 1)
        padded = torch.cat([tokens, tokens.new_zeros(b, 1)], 1)
        nxt = torch.where(pos < lengths[:, None], padded, 0)  # </s> at position L
        prev = torch.cat([tokens.new_zeros(b, 1), tokens], 1)
        prev = torch.where(pos <= lengths[:, None], prev, 0)
        keep = pos <= lengths[:, None]
        if self.order == 1:
            return (self.log_p1[nxt] * keep).sum(1)
        key = prev * self.vocab_size + nxt
        at = torch.searchsorted(self.keys, key).clamp(max=len(self.keys) - 1)
        c = torch.where(self.keys[at] == key, self.counts[at], 0.0)
        ctx = self.context[prev]
        d = self.discount
        mixed = ((c - d).clamp(min=0) + d * self.followers[prev] * self.log_p1[nxt].exp()) / ctx.clamp(min=1)
        p = torch.where(ctx > 0, mixed, self.log_p1[nxt].exp())
        return (p.log() * keep).sum(1)


def _corpus() -> tuple[list[list[str]], list[list[str]], list[list[str]]]:
    try:
        return ptb("train"), ptb("valid"), ptb("test")
    except (FileNotFoundError, ValueError) as e:
        print(f"PTB not available ({str(e).splitlines()[0]}); using {len(FALLBACK)} built-in sentences")
        sents = [s.split() for s in FALLBACK]
        return sents, sents, sents


def _write_and_read(nbest: NBest, refs: dict[str, list[str]], folder: Path) -> tuple[NBest, dict[str, list[str]]]:
    """Write both forms and the references, read them back, check the round trip."""
    paths = write_kaldi_nbest(nbest, folder / "kaldi")
    tsv = write_nbest_tsv(nbest, folder / "nbest.tsv")
    ref_path = write_references(refs, folder / "ref.txt")
    kaldi = read_kaldi_nbest(paths["text"], ac_cost=paths["ac_cost"], lm_cost=paths["lm_cost"])
    if not (kaldi.equal(nbest) and read_nbest_tsv(tsv).equal(nbest)):
        raise RuntimeError(f"{folder}: the written n-best lists did not read back equal")
    return kaldi, read_references(ref_path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=200, help="sentences per split, 0 = all (default 200)")
    parser.add_argument("--n", type=int, default=10, help="hypotheses per utterance (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise", type=float, default=3.0, help="acoustic score noise (default 3.0)")
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap replicates (default 1000)")
    parser.add_argument("--out", default="runs/examples/rescoring", help="where the n-best files go")
    parser.add_argument("--record", metavar="NAME", default=None,
                        help="also write the figures as benchmarks/records/NAME.json (a committed record)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    recorder = _recorder(args, argv)
    start = time.perf_counter()
    train, valid, test = _corpus()
    if args.sentences > 0:
        valid, test = valid[: args.sentences], test[: args.sentences]
    vocab = Vocabulary.build(train)
    lexicon = vocab.tokens[2:]
    pron = cmu_pronunciations({*lexicon, *(w for s in valid + test for w in s)})
    sets = {}
    for name, sents, seed in (("dev", valid, args.seed), ("test", test, args.seed + 1)):
        nb, refs = simulate_nbest(sents, n=args.n, seed=seed, lexicon=lexicon, pronunciations=pron, noise=args.noise,
                                  prefix=f"{name}-")
        sets[name] = _write_and_read(nb, refs, Path(args.out) / name)
    (dev, dev_refs), (tst, test_refs) = sets["dev"], sets["test"]
    print(f"simulated n-best (not ASR): dev {dev}, test {tst}; files under {args.out}")
    stream = vocab.encode_stream(train)
    lms = {"unigram": CountedBigram(stream, len(vocab), 1), "bigram": CountedBigram(stream, len(vocab), 2)}
    dev_err, test_err = hypothesis_errors(dev, dev_refs), hypothesis_errors(tst, test_refs)
    grid_l = [0.05 * k for k in range(41)]
    grid_b = [0.5 * k for k in range(-4, 13)]
    gen = torch.Generator().manual_seed(args.seed)
    record: dict[str, object] = {"sentences": [dev.num_utterances, tst.num_utterances], "n": args.n}
    results = {}
    for name, lm in lms.items():
        tuned = tune_weights(dev, dev_refs, lm_scores(dev, lm, vocabulary=vocab), lm_weights=grid_l,
                             length_penalties=grid_b, errors=dev_err)
        res = evaluate_rescoring(tst, test_refs, lm_scores(tst, lm, vocabulary=vocab), lm_weight=tuned.lm_weight,
                                 length_penalty=tuned.length_penalty, samples=args.samples, generator=gen,
                                 errors=test_err)
        results[name] = res
        if not record.get("first_pass_wer"):
            print(f"test first pass {res.first_pass_interval}; oracle {res.oracle.percent:.2f}%")
            record.update(first_pass_wer=res.first_pass.percent, oracle_wer=res.oracle.percent,
                          first_pass_low=round(100 * res.first_pass_interval.low, 4),
                          first_pass_high=round(100 * res.first_pass_interval.high, 4),
                          hypotheses=[len(dev.hypotheses), len(tst.hypotheses)])
        print(f"test {name:8s} {res.rescored_interval}  (lambda {tuned.lm_weight:.2f}, beta {tuned.length_penalty:+.1f}"
              f", dev WER {100 * tuned.wer:.2f}%); vs first pass {res.comparison}")
        record[name] = {k: round(v, 4) for k, v in res.summary().items()}
        record[name]["dev_wer"] = round(100 * tuned.wer, 4)
    pair = paired_bootstrap(results["unigram"].rescored_errors, results["bigram"].rescored_errors,
                            results["bigram"].ref_lengths, samples=args.samples, generator=gen)
    print(f"bigram vs unigram: {pair}")
    record.update(bigram_vs_unigram={"delta": round(100 * pair.delta, 4), "low": round(100 * pair.low, 4),
                                     "high": round(100 * pair.high, 4), "poi": pair.poi},
                  seconds=round(time.perf_counter() - start, 1))
    print(json.dumps(record))
    if recorder is not None:
        recorder.write(record, notes=(
            "SIMULATED n-best lists from PTB valid (dev) and test (ebms.metrics.rescoring.simulate_nbest), not "
            "ASR. WERs in percent; lm_weight and length_penalty tuned on dev (lambda 0..2 by 0.05, beta -2..6 "
            "by 0.5); test intervals: utterance-level percentile bootstrap (samples resamples, 95 %); delta = "
            "rescored - first pass (paired bootstrap); bigram_vs_unigram: bigram - unigram on shared resamples, "
            "poi = share of resamples where the bigram has fewer errors. One simulated set (seed), so the "
            "intervals cover the utterance sample, not the simulation's seed. seconds: the script's wall time."))


def _recorder(args: argparse.Namespace, argv: list[str] | None) -> object | None:
    """A ``benchmarks/_record.py`` Recorder for ``--record NAME`` (made at the start of the run), else None."""
    if args.record is None:
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _record import Recorder

    return Recorder(args.record, seeds=[args.seed], argv=[sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
                    settings={"sentences": args.sentences, "n": args.n, "noise": args.noise,
                              "samples": args.samples, "threads": 1})


if __name__ == "__main__":
    main()
