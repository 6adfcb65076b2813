"""Language data: corpora, vocabularies, and batches of token ids.

The token-id contract shared by every language model in ebms (n-gram, LSTM, Transformer, TRF):

* id ``0`` is the sentence boundary: ``</s>`` as an outcome, ``<s>`` in histories; it never
  appears inside a sentence (the ``boundary=0`` convention of :class:`ebms.distributions.NGram`);
* id ``1`` is ``<unk>``, an ordinary token that every out-of-vocabulary token maps to;
* ids ``2, 3, ...`` are the training tokens by decreasing count, ties by string, so they do not
  depend on the order of the sentences.

A batch of sentences is a :class:`~ebms.sequences.Sequences` (``tokens (B, T)``, ``lengths (B,)``,
ids ``>= 1`` inside each sentence, padding ``0``); running text for truncated BPTT is one
``(N,)`` stream with a ``0`` after each sentence.

What is here:

* :class:`Vocabulary` — ``build`` from token lists (``min_count``, ``max_size``), ``from_file``
  (streamed), ``encode``/``decode`` (``Sequences``), ``encode_stream``/``decode_stream``,
  ``to_text``, ``save``/``load`` (a UTF-8 text file: a header line, then one token per line);
* readers — :func:`read_sentences` (a user's file, one sentence per line, or running text with
  :func:`split_sentences`), :func:`iter_sentences` (the same, streamed lazily for files larger
  than memory), :func:`ptb` (Penn Treebank, Mikolov's splits) and :func:`tiny_shakespeare`
  (deterministic 90/5/5 split, character or word level, running text or lines), both located
  under ``$EBMS_DATA`` and checked by SHA-256 (:mod:`ebms.data.paths`);
* batching — :func:`sentence_batches` (length-bucketed, shuffled by a ``torch.Generator``) and
  :func:`bptt_batches` (the contiguous ``(B, T)`` stream layout of truncated BPTT),
  :func:`length_windows` (the Trainer's batches of similar length); :func:`unigram_probs`;
  :func:`continuation_pairs` (prefix and continuation of each sentence, for residual EBMs);
  :func:`replace_one_token` (a one-token corruption of each sentence).

Levels: ``"word"`` tokens are the whitespace-separated strings of a line (tokenise beforehand;
PTB already is); ``"char"`` tokens are characters, the space included, so decoding joins them
without separators (:meth:`Vocabulary.to_text`).

Example:
    >>> import torch
    >>> vocab = Vocabulary.build([["the", "cat", "sat"], ["the", "dog"]])
    >>> batch = vocab.encode([["the", "cat"], ["a", "dog", "sat"]])
    >>> batch.tokens.tolist(), batch.lengths.tolist()
    ([[2, 3, 0], [1, 4, 5]], [2, 3])
    >>> vocab.to_text(batch)
    ['the cat', '<unk> dog sat']
    >>> vocab.encode_stream([["the", "cat"], ["dog"]]).tolist()
    [2, 3, 0, 4, 0]
"""

from __future__ import annotations

from ebms.data._text_batches import (
    bptt_batches,
    continuation_pairs,
    length_windows,
    replace_one_token,
    sentence_batches,
    unigram_probs,
)
from ebms.data._text_corpora import SHA256, SPLITS, TEXT_FORMS, URLS, ptb, tiny_shakespeare, tiny_shakespeare_bounds
from ebms.data._text_read import (
    ABBREVIATIONS,
    LEVELS,
    MAX_SENTENCE_CHARS,
    MAX_TEXT_BYTES,
    iter_sentences,
    read_sentences,
    split_sentences,
)
from ebms.data._text_vocab import Vocabulary

__all__ = [
    "ABBREVIATIONS",
    "LEVELS",
    "MAX_SENTENCE_CHARS",
    "MAX_TEXT_BYTES",
    "SHA256",
    "SPLITS",
    "TEXT_FORMS",
    "URLS",
    "Vocabulary",
    "bptt_batches",
    "continuation_pairs",
    "iter_sentences",
    "length_windows",
    "ptb",
    "read_sentences",
    "replace_one_token",
    "sentence_batches",
    "split_sentences",
    "tiny_shakespeare",
    "tiny_shakespeare_bounds",
    "unigram_probs",
]
