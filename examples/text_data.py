"""Text data for language models: read a corpus, build a vocabulary, encode, batch, save.

Run:  python examples/text_data.py [--corpus ptb|shakespeare|FILE] [--batch-size 32] [--bptt 35]
(well under a second for PTB; PTB and Tiny Shakespeare are read from $EBMS_DATA, and a small
built-in text is used, with a note, when they are absent). FILE is your own text, one sentence
per line.

It prints the corpus sizes, the vocabulary (id 0 is </s>, id 1 <unk>), one decoded batch of
length-bucketed sentences with its padding, the truncated-BPTT stream layout, and writes the
vocabulary to runs/examples/text_vocab.txt (reloaded to check the round trip).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from ebms.data.text import (
    Vocabulary,
    bptt_batches,
    ptb,
    read_sentences,
    sentence_batches,
    split_sentences,
    tiny_shakespeare,
)

FALLBACK = """The cat sat on the mat. The dog sat on the log! Did the cat see the dog? It did.
The dog ran away. The cat stayed on the mat, and the sun went down."""


def load(corpus: str) -> tuple[list[list[str]], list[list[str]], str]:
    """(train, test, level) sentences of the chosen corpus."""
    try:
        if corpus == "ptb":
            return ptb("train"), ptb("test"), "word"
        if corpus == "shakespeare":
            return (tiny_shakespeare("train", form="lines"), tiny_shakespeare("test", form="lines"), "char")
    except FileNotFoundError as err:
        print(f"note: {err}\nnote: using a small built-in text instead")
        sentences = [s.split() for s in split_sentences(FALLBACK)]
        return sentences[:-1], sentences[-1:], "word"
    return read_sentences(corpus), read_sentences(corpus), "word"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="ptb", help="ptb (default), shakespeare, or a text file")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    start = time.perf_counter()
    train, test, level = load(args.corpus)
    vocab = Vocabulary.build(train, level=level)
    data = vocab.encode(train)
    seconds = time.perf_counter() - start
    n_tokens = int(data.lengths.sum())
    print(f"{args.corpus}: {len(train):,} training sentences, {n_tokens:,} tokens ({level} level); "
          f"read + vocabulary + encode in {seconds:.2f} s")
    print(f"vocabulary: {len(vocab):,} ids; first ones {list(vocab.tokens[:6])}")
    test_ids = vocab.encode(test)
    unk = int((test_ids.tokens[test_ids.mask()] == Vocabulary.UNK).sum())
    print(f"test: {len(test):,} sentences, {int(test_ids.lengths.sum()):,} tokens, {unk:,} of them <unk>")

    g = torch.Generator().manual_seed(args.seed)
    batches = sentence_batches(data, min(args.batch_size, len(data)), generator=g)
    padded = sum(b.tokens.numel() for b in batches)
    print(f"{len(batches)} length-bucketed batches; padding {1 - n_tokens / padded:.1%} of the cells "
          f"(unbucketed: {1 - n_tokens / data.tokens.numel():.1%})")
    first = batches[0]
    print(f"one batch {tuple(first.tokens.shape)}, lengths {first.lengths.tolist()[:8]}...:")
    for line in vocab.to_text(first[:2]):
        print(f"  {line[:90]}")

    stream = vocab.encode_stream(train)  # each sentence followed by </s> (id 0)
    rows = min(args.batch_size, max(1, len(stream) // 2))
    chunks = bptt_batches(stream, rows, args.bptt)
    x, y = chunks[0]
    print(f"BPTT: stream of {len(stream):,} ids -> {len(chunks)} batches of inputs {tuple(x.shape)} "
          f"and targets shifted by one")

    out = Path("runs/examples")
    out.mkdir(parents=True, exist_ok=True)
    path = vocab.save(out / "text_vocab.txt")
    assert Vocabulary.load(path) == vocab
    print(f"wrote {path} ({path.stat().st_size:,} bytes) and read it back")


if __name__ == "__main__":
    main()
