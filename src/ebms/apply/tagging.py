"""Tags of new sentences by a trained CRF tagger: what ``ebms tag`` and :meth:`ebms.runs.Run.tag` compute.

A :class:`SentenceTagger` holds a trained tagger (a :class:`~ebms.models.NeuralCRFTagger`, a
:class:`~ebms.models.FeatureCRF`, or a JRF's CRF), its tag list and the function that encoded its
test sentences at evaluation (the run's stored word, character or attribute maps: an unknown word
becomes ``<unk>``, an unknown attribute is dropped, exactly as for the test split). Calling it on
sentences decodes them as ``ebms eval`` does (:func:`ebms.metrics.tagger_eval.decode_tags`:
Viterbi, BIO-constrained for the neural taggers, in length-sorted batches of ``batch_size``
sentences after encoding the whole input at once), so the run's own test split tagged here gives
the tags, and the figures, of ``ebms eval``.

Input (:func:`read_tagging_input`), one of two formats:

* ``conll``: one token per line with its whitespace-separated columns (the word first), a blank
  line between sentences, ``-DOCSTART-`` lines skipped; every token line has the same columns. A
  last column beyond those the run reads whose every value is a tag (``O``, ``B-X``, ``I-X``,
  ...) holds gold tags: :meth:`SentenceTagger.tag_input` then scores the predictions against it
  (chunk precision, recall and F1 of :func:`ebms.metrics.chunking.conlleval`, percent).
* ``tokens``: one sentence per line, tokens separated by whitespace (an empty line is an empty
  sentence).

``auto`` reads the lines as CoNLL when blank lines split them into sentences of several lines
(or a ``-DOCSTART-`` line opens them), or when, without blank lines, every line has the same
number (>= 2) of fields and the last one is a tag; otherwise as tokens.

Output (:meth:`TagResult.conll_lines`): each token's input columns and its predicted tag, a blank
line after each sentence. Tags are strict IOB2 (:func:`ebms.data.conll.to_iob2` of the Viterbi
tags, which the neural taggers' constrained decoding gives unchanged; the feature CRF decodes
without constraints, and an ``I-X`` it puts after ``O`` is written as the ``B-X`` conlleval reads
it as: the chunks, hence the scores, are those of ``ebms eval``).

Example::

    run = ebms.runs.load_run("runs/chunk")
    run.tag([["He", "reckons", "the", "deficit"]])    # one tag per token, e.g. [['B-NP', 'B-VP', 'B-NP', 'I-NP']]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ebms._progress import progress_bar
from ebms.data.conll import Sentence, parse_tag, read_conll, to_iob2
from ebms.errors import DataError
from ebms.metrics.chunking import ChunkScores, conlleval
from ebms.metrics.tagger_eval import decode_tags
from ebms.structured.features import EncodedCorpus

__all__ = ["FORMATS", "SentenceTagger", "TagResult", "TaggingInput", "looks_like_tags", "read_tagging_input"]

#: the input formats (module docstring); ``auto`` picks one of the others.
FORMATS = ("auto", "conll", "tokens")
_DOCSTART = "-DOCSTART-"


@dataclass(frozen=True)
class TaggingInput:
    """Sentences read by :func:`read_tagging_input`.

    Attributes:
        sentences: one :class:`~ebms.data.conll.Sentence` per sentence, its rows the input columns of each
            token (one column for ``tokens`` input; an empty sentence has no rows).
        format: ``"conll"`` or ``"tokens"``: how the lines were read.
        columns: fields per token line (``1`` for ``tokens``).
        source: how messages name the input (e.g. ``"FILE 'x.txt'"``).
    """

    sentences: list[Sentence]
    format: str
    columns: int
    source: str


def looks_like_tags(values: Sequence[str]) -> bool:
    """Every value is a chunk tag (``O``, ``B-NP``, ``I-PER``, ``S-LOC``, a bare ``B``, ...) and there is one."""
    if not values:
        return False
    try:
        for v in values:
            parse_tag(v)
    except ValueError:
        return False
    return True


def _blocks(lines: Sequence[str]) -> list[list[str]]:
    """The runs of non-blank lines."""
    out: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            out[-1].append(line)
        elif out[-1]:
            out.append([])
    return [b for b in out if b]


def _detect(lines: Sequence[str]) -> str:
    blocks = _blocks(lines)
    if not blocks:
        return "tokens"
    if blocks[0][0].split()[0] == _DOCSTART or (len(blocks) > 1 and any(len(b) > 1 for b in blocks)):
        return "conll"
    widths = {len(line.split()) for line in blocks[0]}
    if len(blocks) == 1 and len(widths) == 1 and widths.pop() >= 2:
        return "conll" if looks_like_tags([line.split()[-1] for line in blocks[0]]) else "tokens"
    return "tokens"


def read_tagging_input(lines: Sequence[str], *, fmt: str = "auto", source: str = "input") -> TaggingInput:
    """The sentences of ``lines`` (text lines without line ends) in the format ``fmt`` (:data:`FORMATS`).

    Args:
        lines: the input's lines.
        fmt: ``"conll"``, ``"tokens"`` or ``"auto"`` (module docstring).
        source: how messages name the input, e.g. ``"FILE 'new.txt'"``.

    Raises:
        ebms.errors.DataError: no token at all, or CoNLL lines of unequal column counts (naming the line).
        ValueError: an unknown ``fmt``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt: expected one of {', '.join(FORMATS)}; got {fmt!r}")
    if not any(line.strip() for line in lines):
        raise DataError(f"{source}: no tokens (the input is empty); give one sentence per line, or CoNLL lines (one "
                        f"token per line, a blank line between sentences)")
    fmt = _detect(lines) if fmt == "auto" else fmt
    if fmt == "tokens":
        sents = [Sentence(tuple((w,) for w in line.split())) for line in lines]
        return TaggingInput(sents, "tokens", 1, source)
    try:
        sents = read_conll(lines)
    except DataError as e:
        where = str(e).removeprefix("<lines>: ")
        raise DataError(f"{source}: not CoNLL: {where} (every token line of a CoNLL file has the same columns; for "
                        f"plain text, one sentence per line, give --format tokens)") from None
    if not sents:
        raise DataError(f"{source}: no tokens (only {_DOCSTART} lines); give CoNLL lines, one token per line")
    return TaggingInput(sents, "conll", len(sents[0].tokens[0]), source)


@dataclass(frozen=True)
class TagResult:
    """What :meth:`SentenceTagger.tag_input` returns.

    Attributes:
        input: the sentences tagged.
        tags: the predicted IOB2 tags of each sentence (``len(tags[i]) == len(input.sentences[i])``).
        gold_column: the 1-based column holding gold tags, or ``None`` when the input has none.
        scores: the chunk scores (percent) of ``tags`` against that column, or ``None``.
    """

    input: TaggingInput
    tags: list[list[str]]
    gold_column: int | None = None
    scores: ChunkScores | None = None

    def conll_lines(self) -> Iterator[str]:
        """Each token's input columns and its tag (space-separated), then a blank line after each sentence."""
        for sent, tags in zip(self.input.sentences, self.tags):
            for row, tag in zip(sent.tokens, tags):
                yield " ".join((*row, tag))
            yield ""

    def summary(self) -> str:
        """One line of the scores against the gold column (``""`` without one)."""
        s = self.scores
        if s is None:
            return ""
        n = len(self.input.sentences)
        return (f"chunk F1 {s.f1:.2f}, precision {s.precision:.2f}, recall {s.recall:.2f} (percent, conlleval) "
                f"against the gold tags of column {self.gold_column} of {self.input.source}: {s.n_true} chunks, "
                f"{s.n_pred} predicted, {s.n_correct} correct, in {n} sentence{'s' if n != 1 else ''}")


class SentenceTagger:
    """A trained CRF tagger applied to new sentences (module docstring).

    Args:
        model: the tagger: ``model(*inputs, lengths, **model_kwargs).argmax`` gives the best tags ``(B, T)``.
        tag_names: the name of each tag id (the run's stored tag list).
        encode: the run's encoding of sentences (its stored maps): ``list[Sentence] ->`` padded tensors
            ``(N, T, ...)`` or an :class:`~ebms.structured.features.EncodedCorpus`.
        reads: the columns each token needs, in order (``("word",)``; a feature CRF's ``("word", "POS")``).
        what: how messages name the run's model (e.g. ``"model.kind='feature-crf'"``).
        model_kwargs: keywords of every model call (``{"constrained": True}``: BIO-constrained Viterbi).
        batch_size: sentences per length-sorted decoding batch (``ebms eval``'s chunk size by default).
        progress: show a progress bar on stderr over the batches (``run.progress``).
    """

    def __init__(self, model: nn.Module, tag_names: Sequence[str], encode: Callable[[list[Sentence]], Any], *,
                 reads: Sequence[str] = ("word",), what: str = "the run", model_kwargs: Mapping[str, Any] | None = None,
                 batch_size: int = 512, progress: bool = False) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected an integer >= 1; got {batch_size!r}")
        if not tag_names or not reads:
            raise ValueError(f"tag_names, reads: expected non-empty lists; got {list(tag_names)}, {list(reads)}")
        self.model, self.tag_names, self.encode = model, list(tag_names), encode
        self.reads, self.what = tuple(reads), what
        self.model_kwargs = dict(model_kwargs or {})
        self.batch_size, self.progress = batch_size, progress

    def __call__(self, sentences: Sequence[Any]) -> list[list[str]]:
        """The IOB2 tags of each sentence: a list of tokens (``str``), of column tuples (word first, as
        :attr:`reads`), or a :class:`~ebms.data.conll.Sentence`; ``out[i]`` has one tag per token."""
        sents = [_sentence(s, i) for i, s in enumerate(sentences)]
        self._check_columns(sents, "sentences")
        return self.tag(sents)

    def _needs(self, numbered: bool = False) -> str:
        """The columns it reads in words: ``"the word (column 1) and POS (column 2)"``."""
        names = [f"{c} (column {i + 1})" if numbered else c for i, c in enumerate(self.reads)]
        return "the " + (" and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else names[0])

    def _check_columns(self, sents: Sequence[Sentence], source: str) -> None:
        width = min((len(s.tokens[0]) for s in sents if len(s)), default=len(self.reads))
        if width < len(self.reads):
            raise DataError(f"{source}: {self.what} reads {self._needs(True)} of every token; the input has {width} "
                            f"column{'s' if width != 1 else ''}: give CoNLL lines with those columns first")

    def tag(self, sentences: Sequence[Sentence], *, batch_size: int | None = None,
            progress: bool | None = None) -> list[list[str]]:
        """The IOB2 tags of ``sentences`` (columns as :attr:`reads`; empty ones get ``[]``).

        Cost: one encoding of the whole input, then one forward and one Viterbi pass per batch.
        """
        size = self.batch_size if batch_size is None else batch_size
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"batch_size: expected an integer >= 1; got {size!r}")
        keep = [i for i, s in enumerate(sentences) if len(s)]
        out: list[list[str]] = [[] for _ in sentences]
        if not keep:
            return out
        inputs = self.encode([sentences[i] for i in keep])  # all at once, as the test split at evaluation
        lengths = torch.tensor([len(sentences[i]) for i in keep], dtype=torch.long)
        on = self.progress if progress is None else progress
        with progress_bar(total=len(keep), desc="tag", enabled=on, leave=False, unit="sent") as bar:
            for idx in torch.argsort(lengths, stable=True).split(size):  # the batches of decode_tags
                rows = (tuple(inputs.padded(idx)[:2]) if isinstance(inputs, EncodedCorpus)
                        else tuple(x[idx] for x in inputs))
                best = decode_tags(self.model, rows, lengths[idx], self.tag_names, chunk_size=len(idx),
                                   model_kwargs=self.model_kwargs)
                for i, tags in zip(idx.tolist(), best):
                    out[keep[i]] = to_iob2(tags)
                bar.update(len(idx))
        return out

    def tag_input(self, inp: TaggingInput, *, batch_size: int | None = None,
                  progress: bool | None = None) -> TagResult:
        """Tag what :func:`read_tagging_input` read, scored against its gold column when it has one.

        Raises:
            ebms.errors.DataError: fewer columns than :attr:`reads` (``tokens`` input to a feature CRF, a
                CoNLL file without its POS column), naming the input and the columns needed.
        """
        if inp.format == "tokens" and len(self.reads) > 1:
            raise DataError(f"{inp.source}: plain tokens, but {self.what} reads {self._needs()} of every token; "
                            f"give CoNLL lines instead: one token per line with {self._needs(True)}, a blank line "
                            f"between sentences")
        self._check_columns(inp.sentences, inp.source)
        gold = self.gold_column(inp)
        if gold is None and inp.columns == len(self.reads) > 1 and looks_like_tags(
                [r[-1] for s in inp.sentences for r in s.tokens]):
            raise DataError(f"{inp.source}: column {inp.columns} holds chunk tags, not the {self.reads[-1]} that "
                            f"{self.what} reads there; give {self._needs(True)} of every token first")
        tags = self.tag(inp.sentences, batch_size=batch_size, progress=progress)
        if gold is None:
            return TagResult(inp, tags)
        return TagResult(inp, tags, gold, conlleval([s.column(gold - 1) for s in inp.sentences], tags))

    def gold_column(self, inp: TaggingInput) -> int | None:
        """The 1-based column of gold tags: the last, beyond those read, when every value is a tag; else ``None``."""
        if inp.format != "conll" or inp.columns <= len(self.reads):
            return None
        return inp.columns if looks_like_tags([r[-1] for s in inp.sentences for r in s.tokens]) else None


def _sentence(s: Any, i: int) -> Sentence:
    """``s`` as a :class:`~ebms.data.conll.Sentence` (tokens or column tuples of equal width)."""
    if isinstance(s, Sentence):
        return s
    if isinstance(s, (str, bytes)) or not isinstance(s, Sequence):
        raise TypeError(f"sentences[{i}]: expected a list of tokens (str) or of column tuples; got "
                        f"{type(s).__name__} {s!r:.60} (split a sentence into tokens: text.split())")
    rows = tuple((t,) if isinstance(t, str) else tuple(t) for t in s)
    if any(not r or not all(isinstance(f, str) for f in r) for r in rows) or len({len(r) for r in rows}) > 1:
        raise TypeError(f"sentences[{i}]: expected tokens (str) or column tuples of str of one width; got {s!r:.80}")
    return Sentence(rows)
