r"""ARPA files and n-gram id tables for :class:`~ebms.distributions.BackoffNGram` (private).

The ARPA back-off format (Doug Paul's, as SRILM and KenLM write it)::

    \data\
    ngram 1=<count>
    ngram 2=<count>

    \1-grams:
    <log10 p>   <w>         [<log10 backoff>]
    ...
    \2-grams:
    <log10 p>   <w1> <w2>   [<log10 backoff>]
    ...
    \end\

Fields are separated by whitespace; the backoff is optional (0) and absent at the highest order.
``<s>`` is a unigram with probability ``-99`` (it is never an outcome) and the backoff weight of
the sentence start; ``</s>`` is never a context. Inside ebms both are id 0 (``<s>`` as the first
word of an n-gram, ``</s>`` as the last) and logs are natural: values are converted here, at the
file boundary. Errors name the file and the line.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from typing import NoReturn

import torch
from torch import Tensor

from ebms.distributions._kneser_ney import Tables

LN10 = math.log(10.0)
_COUNT = re.compile(r"ngram\s+(\d+)\s*=\s*(\d+)")


class TableError(ValueError):
    """A bad n-gram row: ``order`` (1-based) and ``row`` (in the order given) locate it."""

    def __init__(self, order: int, row: int, message: str) -> None:
        super().__init__(message)
        self.order, self.row = order, row


def check_words(words: object, vocab_size: int | None, name: str = "words") -> list[str]:
    """Strings without whitespace, distinct, ``words[0] == "</s>"``, no ``<s>`` (``V`` of them if given)."""
    words = getattr(words, "tokens", words)  # an ebms.data.text.Vocabulary gives its tokens
    if isinstance(words, (str, bytes)) or not isinstance(words, Sequence):
        raise TypeError(f"{name}: expected a list of word strings (id order, words[0] = '</s>') or a Vocabulary; "
                        f"got {type(words).__name__}")
    words = list(words)
    if vocab_size is not None and len(words) != vocab_size:
        raise ValueError(f"{name}: expected {vocab_size} words (one per id); got {len(words)}")
    if not words or words[0] != "</s>":
        raise ValueError(f"{name}: id 0 is the sentence boundary, so words[0] must be '</s>'; got "
                         f"{words[0] if words else None!r}")
    seen: set[str] = set()
    for i, w in enumerate(words):
        if not isinstance(w, str) or not w or any(ch.isspace() for ch in w) or w == "<s>" or (i and w == "</s>"):
            raise ValueError(f"{name}: words[{i}] must be a non-empty string without whitespace, other than "
                             f"'<s>' and '</s>'; got {w!r}")
        if w in seen:
            raise ValueError(f"{name}: {w!r} appears twice (words[{i}])")
        seen.add(w)
    return words


def check_rows(vocab_size: int, ngrams: object, log_probs: object, backoffs: object) -> list[Tensor]:
    """Types and shapes of :class:`~ebms.distributions.BackoffNGram`'s constructor arguments;
    returns the backoffs (zeros when ``None``)."""
    order = len(ngrams) if isinstance(ngrams, Sequence) else 0
    if order < 1 or not isinstance(log_probs, Sequence) or len(log_probs) != order:
        got = len(log_probs) if isinstance(log_probs, Sequence) else log_probs
        raise ValueError(f"ngrams, log_probs: expected one tensor per order (at least 1, the same number); got "
                         f"{order} and {got!r}")
    assert isinstance(ngrams, Sequence)
    if backoffs is None:
        backoffs = [torch.zeros(getattr(lp, "shape", (0,))[:1], dtype=torch.float64) for lp in log_probs]
    if not isinstance(backoffs, Sequence) or len(backoffs) != order:
        raise ValueError(f"backoffs: expected one tensor per order ({order}) or None; got {backoffs!r}")
    for m, (g, lp, bo) in enumerate(zip(ngrams, log_probs, backoffs), 1):
        if not isinstance(g, Tensor) or g.dtype != torch.long or g.dim() != 2 or g.shape[1] != m:
            raise ValueError(f"ngrams[{m - 1}]: expected an int64 tensor (N, {m}); got "
                             f"{getattr(g, 'dtype', type(g).__name__)} {tuple(getattr(g, 'shape', ()))}")
        if g.numel() and (int(g.min()) < 0 or int(g.max()) >= vocab_size):
            raise ValueError(f"ngrams[{m - 1}]: expected ids in [0, {vocab_size - 1}]; got {int(g.min())}..{int(g.max())}")
        for name, t in ((f"log_probs[{m - 1}]", lp), (f"backoffs[{m - 1}]", bo)):
            if not isinstance(t, Tensor) or not t.is_floating_point() or tuple(t.shape) != (g.shape[0],):
                raise ValueError(f"{name}: expected a float tensor ({g.shape[0]},); got "
                                 f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
            if bool(torch.isnan(t).any()) or bool((t == math.inf).any()):
                raise ValueError(f"{name}: expected no NaN or +inf entries")
    return list(backoffs)


def tables_from_ngrams(vocab_size: int, ngrams: Sequence[Tensor], log_probs: Sequence[Tensor],
                       backoffs: Sequence[Tensor]) -> Tables:
    """Sorted key tables from ``(N_m, m)`` id rows; raises :class:`TableError` for a bad row."""
    V = vocab_size
    first = ngrams[0][:, 0]
    perm = torch.argsort(first)
    if first.numel() != V or not bool((first[perm] == torch.arange(V, device=first.device)).all()):
        have = torch.zeros(V + 1, dtype=torch.long, device=first.device)
        have.index_add_(0, first.clamp(0, V), torch.ones_like(first))
        bad = int((have[:V] != 1).nonzero()[0]) if bool((have[:V] != 1).any()) else V
        raise TableError(1, 0, f"expected every id 0..{V - 1} exactly once among the unigrams; id {bad} "
                               f"appears {int(have[bad]) if bad < V else 'out of range'} times")
    keys: list[Tensor | None] = [None]
    lps, bows = [log_probs[0][perm]], [backoffs[0][perm]]
    for m in range(2, len(ngrams) + 1):
        g = ngrams[m - 1]
        if m > 2 and bool((g[:, 1:-1] == 0).any()):
            r = int((g[:, 1:-1] == 0).any(1).nonzero()[0])
            raise TableError(m, r, f"id 0 (<s>/</s>) inside the {m}-gram {g[r].tolist()}; it may only begin or end one")
        row = g[:, 0]
        for j in range(1, m - 1):
            row = find(keys[j], row * V + g[:, j])  # type: ignore[arg-type]
        if bool((row < 0).any()):
            r = int((row < 0).nonzero()[0])
            raise TableError(m, r, f"the {m}-gram {g[r].tolist()} has no entry for its context {g[r, :-1].tolist()}")
        key = row * V + g[:, -1]
        key, order = torch.sort(key, stable=True)
        dup = key[1:] == key[:-1]
        if bool(dup.any()):
            r = int(order[1:][dup][0])
            raise TableError(m, r, f"the {m}-gram {g[r].tolist()} appears twice")
        keys.append(key)
        lps.append(log_probs[m - 1][order])
        bows.append(backoffs[m - 1][order])
    return Tables(keys, lps, bows)


def find(keys: Tensor, query: Tensor) -> Tensor:
    """Row of each query key in the sorted ``keys``, ``-1`` when absent (or the query is negative).

    The queries are sorted first: a binary search over sorted queries revisits the same cache
    lines, about twice as fast as in random order on large tables.
    """
    if keys.numel() == 0 or query.numel() == 0:
        return torch.full_like(query, -1)
    flat = query.reshape(-1)
    sorted_q, order = torch.sort(flat)
    pos = torch.searchsorted(keys, sorted_q).clamp_(max=keys.numel() - 1)
    found = torch.where((keys[pos] == sorted_q) & (sorted_q >= 0), pos, -1)
    return torch.empty_like(flat).index_put_((order,), found).reshape(query.shape)


def ngram_ids(tables: Tables, vocab_size: int) -> list[Tensor]:
    """The ``(N_m, m)`` id rows of every order, in table order."""
    V = vocab_size
    ids = [torch.arange(V, device=tables.log_probs[0].device).unsqueeze(1)]
    for key in tables.keys[1:]:
        assert key is not None
        parent = torch.div(key, V, rounding_mode="floor")
        ids.append(torch.cat([ids[-1][parent], (key - parent * V).unsqueeze(1)], 1))
    return ids


def write_arpa(path: str | os.PathLike[str], words: list[str], tables: Tables, digits: int) -> None:
    """Write ``tables`` (natural logs) as ARPA (log10, ``digits`` significant digits)."""
    V, order = len(words), len(tables.log_probs)
    fmt = f"{{:.{digits}g}}".format
    sizes = [V + 1] + [int(k.numel()) for k in tables.keys[1:] if k is not None]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\\data\\\n" + "".join(f"ngram {m}={n}\n" for m, n in enumerate(sizes, 1)))
        names = ["<s>", *words[1:]]  # row -> name as a context (row 0 of order 1 is <s>)
        for m in range(1, order + 1):
            lp = [fmt(v) for v in (tables.log_probs[m - 1] / LN10).tolist()]
            bo = [fmt(v) for v in (tables.backoffs[m - 1] / LN10).tolist()] if m < order else None
            if m == 1:
                grams = list(words)  # row 0 is </s> as an outcome; <s> gets its own line
                start = "-99\t<s>" + (f"\t{bo[0]}" if bo is not None and bo[0] not in ("0", "-0") else "") + "\n"
                if bo is not None:
                    bo[0] = ""
            else:
                key = tables.keys[m - 1]
                assert key is not None
                parent = torch.div(key, V, rounding_mode="floor")
                grams = [f"{names[p]} {words[w]}" for p, w in zip(parent.tolist(), (key - parent * V).tolist())]
                start = ""
            fh.write(f"\n\\{m}-grams:\n{start}")
            if bo is None:
                fh.writelines(f"{p}\t{g}\n" for p, g in zip(lp, grams))
            else:
                fh.writelines(f"{p}\t{g}\t{b}\n" if b not in ("", "0", "-0") else f"{p}\t{g}\n"
                              for p, g, b in zip(lp, grams, bo))
            if m > 1:
                names = grams
        fh.write("\n\\end\\\n")


def read_arpa(path: str | os.PathLike[str], words: list[str] | None) -> tuple[
        list[str], list[Tensor], list[Tensor], list[Tensor], list[list[int]]]:
    """Parse an ARPA file: ``(words, ngrams (N_m, m), log_probs, backoffs (natural), line numbers)``.

    With ``words`` ``None`` the vocabulary is the file's: ``</s>``, ``<unk>`` (when listed), then
    the other unigrams in file order.
    """
    where = os.fspath(path)
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 (closed below)
    except OSError as err:
        raise FileNotFoundError(f"{where}: cannot read the ARPA file ({err.strerror})") from None
    with fh:
        return _Parser(where, fh, words).parse()


class _Parser:
    def __init__(self, where: str, fh: Iterable[str], words: list[str] | None) -> None:
        self.where, self.lines, self.no = where, iter(fh), 0
        self.words = words
        self.index: dict[str, int] = {w: i for i, w in enumerate(words)} if words is not None else {}
        self.seen: set[int] = set()

    def fail(self, message: str, no: int | None = None) -> NoReturn:
        raise ValueError(f"{self.where}:{self.no if no is None else no}: {message}")

    def next_line(self) -> str | None:
        for line in self.lines:
            self.no += 1
            return line.strip()
        return None

    def next_nonblank(self, what: str) -> str:
        while (s := self.next_line()) is not None:
            if s:
                return s
        raise ValueError(f"{self.where}: the file ends before {what} (after line {self.no})")

    def parse(self) -> tuple[list[str], list[Tensor], list[Tensor], list[Tensor], list[list[int]]]:
        while (s := self.next_line()) != "\\data\\":
            if s is None:
                raise ValueError(f"{self.where}: not an ARPA file: no '\\data\\' line")
        counts: list[int] = []
        while (s := self.next_nonblank("the n-gram sections")).startswith("ngram"):
            hit = _COUNT.fullmatch(s)
            if hit is None or int(hit[1]) != len(counts) + 1:
                self.fail(f"expected 'ngram {len(counts) + 1}=<count>'; got {s[:80]!r}")
            counts.append(int(hit[2]))
        if not counts:
            self.fail(f"expected 'ngram 1=<count>' after '\\data\\'; got {s[:80]!r}")
        order, out = len(counts), []
        for m in range(1, order + 1):
            if s != f"\\{m}-grams:":
                hint = "" if s.startswith("\\") else f"more {m - 1}-grams than the {counts[m - 2]} announced, or "
                self.fail(f"{hint}expected the section header '\\{m}-grams:'; got {s[:80]!r}")
            section = self.section(m, order, counts[m - 1])
            out.append(self.vocabulary(section) if m == 1 else section)
            s = self.next_nonblank("'\\end\\'" if m == order else f"the '\\{m + 1}-grams:' section")
        if s != "\\end\\":
            hint = "" if s.startswith("\\") else f"more {order}-grams than the {counts[-1]} announced, or "
            self.fail(f"{hint}expected '\\end\\' after the {order}-grams; got {s[:80]!r}")
        assert self.words is not None
        ngrams = [torch.tensor(ids, dtype=torch.long).reshape(len(lp), m) for m, (ids, lp, _, _) in enumerate(out, 1)]
        lps = [torch.tensor(lp, dtype=torch.float64) * LN10 for _, lp, _, _ in out]
        bows = [torch.tensor(bo, dtype=torch.float64) * LN10 for _, _, bo, _ in out]
        return self.words, ngrams, lps, bows, [no for *_, no in out]

    def section(self, m: int, order: int, count: int) -> tuple[list[int], list[float], list[float], list[int]]:
        ids: list[int] = []
        lps: list[float] = []
        bows: list[float] = []
        nos: list[int] = []
        for i in range(count):
            s = self.next_line()
            if not s or s.startswith("\\"):
                self.fail(f"the {m}-grams section has {i} entries; '\\data\\' announced {count}",
                          None if s is not None else self.no)
            parts = s.split()
            if len(parts) != m + 1 and (len(parts) != m + 2 or m == order):
                self.fail(f"expected a {m}-gram line: log10 probability, {m} word(s)"
                          f"{', optional log10 backoff' if m < order else ''}; got {s[:80]!r}")
            try:
                lp, bo = float(parts[0]), float(parts[m + 1]) if len(parts) == m + 2 else 0.0
            except ValueError:
                self.fail(f"expected numbers for the log10 probability and backoff; got {s[:80]!r}")
            if math.isnan(lp) or math.isnan(bo) or lp == math.inf or bo == math.inf:
                self.fail(f"expected log10 values that are not NaN or +inf; got {s[:80]!r}")
            if m == 1:
                ids.append(self.unigram(parts[1]))
            else:
                ids.extend(self.word_id(w, j, m) for j, w in enumerate(parts[1 : m + 1]))
            lps.append(lp)
            bows.append(bo)
            nos.append(self.no)
        return ids, lps, bows, nos

    def unigram(self, w: str) -> int:
        if w in ("<s>", "</s>"):
            key = -1 if w == "<s>" else 0
        elif w in self.index:
            key = self.index[w]
        elif self.words is not None:
            self.fail(f"the word {w!r} is not in the vocabulary ({len(self.words)} words)")
        else:
            key = self.index[w] = -2 - len(self.index)  # file order; final ids in vocabulary()
        if key in self.seen:
            self.fail(f"the unigram {w!r} is listed twice")
        self.seen.add(key)
        return key

    def word_id(self, w: str, j: int, m: int) -> int:
        if (w == "<s>" and j == 0) or (w == "</s>" and j == m - 1):
            return 0
        if w in ("<s>", "</s>"):
            self.fail(f"{w!r} may only {'begin' if w == '<s>' else 'end'} an n-gram; got it as word {j + 1} of {m}")
        i = self.index.get(w)
        if i is None:
            self.fail(f"the word {w!r} has no unigram entry")
        return i

    def vocabulary(self, unigrams: tuple[list[int], list[float], list[float], list[int]]) -> tuple[
            list[int], list[float], list[float], list[int]]:
        """Fix the ids (the file's order when no words were given) and fold ``<s>``'s backoff into row 0."""
        ids, lps, bows, nos = unigrams
        if self.words is None:
            order = sorted(self.index, key=lambda w: (w != "<unk>", -self.index[w]))
            self.words = ["</s>", *order]
            remap = {self.index[w]: i for i, w in enumerate(order, 1)}
            ids = [remap.get(v, v) for v in ids]
            self.index = {w: i for i, w in enumerate(self.words)}
        if 0 not in ids:
            raise ValueError(f"{self.where}: the unigrams do not list '</s>'")
        start_bow = bows[ids.index(-1)] if -1 in ids else 0.0
        keep = [i for i, v in enumerate(ids) if v != -1]
        ids, nos = [ids[i] for i in keep], [nos[i] for i in keep]
        lps, bows = [lps[i] for i in keep], [bows[i] for i in keep]
        bows[ids.index(0)] = start_bow
        listed = set(ids)
        missing = [w for i, w in enumerate(self.words) if i not in listed]
        if missing:
            raise ValueError(f"{self.where}: {len(missing)} vocabulary word(s) have no unigram entry (e.g. "
                             f"{missing[0]!r}); an ARPA file must list every word")
        return ids, lps, bows, nos
