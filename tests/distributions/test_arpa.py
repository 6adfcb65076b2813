"""ARPA files of BackoffNGram: exact round trips, a hand-written file scored by hand, KenLM (the
``kenlm`` query package, when installed) scoring our files like we do, and one-line errors naming
the file and the line for every malformation.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from ebms.distributions.backoff import BackoffNGram
from ebms.sequences import Sequences

LN10 = math.log(10)


def _zipf_corpus(n, seed, V=40):
    rng = random.Random(seed)
    return [rng.choices(range(V), [0] + [1 / i**1.5 for i in range(1, V)], k=rng.randrange(0, 10)) for _ in range(n)]


WORDS = ["</s>", "<unk>", *(f"w{i}" for i in range(2, 40))]
CORPUS = _zipf_corpus(400, seed=7)
TEST = _zipf_corpus(60, seed=8) + [[1, 39, 38, 1], [], [5, 5, 5, 5, 5, 5]]


def _fit(order, smoothing, prune=None):
    kw: dict = {"k": 0.3} if smoothing == "add_k" else {}
    if smoothing == "modified_kneser_ney" and order == 5:  # this corpus's order-5 estimate of D3+ is < 0
        kw["discounts"] = [(0.6, 1.0, 1.4)] * order
    return BackoffNGram.fit(Sequences.from_lists(CORPUS), 40, order, smoothing=smoothing, prune=prune, **kw)


CASES = [(o, s, p) for s in ("modified_kneser_ney", "kneser_ney", "witten_bell", "add_k") for o in (2, 3, 5)
         for p in (None, (0, 1, 1))] + [(1, "witten_bell", None)]


# --- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize("order, smoothing, prune", CASES)
def test_round_trip_is_exact_to_file_precision(tmp_path, order, smoothing, prune):
    lm = _fit(order, smoothing, prune[:order] if prune else None)
    path = tmp_path / "lm.arpa"
    lm.to_arpa(path, WORDS)
    back = BackoffNGram.from_arpa(path, WORDS)
    assert back.num_ngrams == lm.num_ngrams and back.order == order
    for m in range(1, order + 1):
        ids, lp, bo = lm.ngrams(m)
        ids2, lp2, bo2 = back.ngrams(m)
        assert torch.equal(ids, ids2)
        # 7 significant digits of log10: relative error <= 5e-7 (the same in natural logs)
        torch.testing.assert_close(lp2, lp, rtol=5.0001e-7, atol=0)
        torch.testing.assert_close(bo2, bo, rtol=5.0001e-7, atol=1e-300)
    again = tmp_path / "again.arpa"
    back.to_arpa(again, WORDS)
    assert again.read_bytes() == path.read_bytes()  # file -> model -> file is the identity


def test_more_digits_give_a_tighter_round_trip(tmp_path):
    lm = _fit(3, "modified_kneser_ney")
    lm.to_arpa(tmp_path / "lm.arpa", WORDS, digits=17)
    back = BackoffNGram.from_arpa(tmp_path / "lm.arpa", WORDS)
    test = Sequences.from_lists(TEST)
    torch.testing.assert_close(back.log_prob(test), lm.log_prob(test), rtol=1e-14, atol=0)


def test_header_counts_list_start_symbol_and_backoffs_only_where_needed(tmp_path):
    lm = _fit(2, "witten_bell")
    lm.to_arpa(tmp_path / "lm.arpa", WORDS)
    lines = (tmp_path / "lm.arpa").read_text().splitlines()
    assert lines[:3] == ["\\data\\", "ngram 1=41", f"ngram 2={lm.num_ngrams[1]}"] and lines[-1] == "\\end\\"
    unigrams = lines[lines.index("\\1-grams:") + 1 : lines.index("\\2-grams:") - 1]
    start = next(line.split("\t") for line in unigrams if line.split("\t")[1] == "<s>")
    end = next(line.split("\t") for line in unigrams if line.split("\t")[1] == "</s>")
    assert start[0] == "-99" and len(start) == 3 and len(end) == 2  # </s> is never a context
    bigrams = lines[lines.index("\\2-grams:") + 1 : -2]
    assert all(len(line.split("\t")) == 2 for line in bigrams)  # no backoff at the highest order


# --- a hand-written file --------------------------------------------------------------------------

HAND = """some tool's banner before the data
\\data\\
ngram 1=5
ngram 2=4

\\1-grams:
-0.8\t</s>
-99\t<s>\t-0.3
-1.0\t<unk>
-0.5\ta\t-0.2
-0.7\tb\t-0.1

\\2-grams:
-0.2\t<s> a
-0.3\ta b
-0.25\tb </s>
-0.4\ta a

\\end\\
"""


def test_hand_written_file_scores_by_backoff_semantics(tmp_path):
    path = tmp_path / "hand.arpa"
    path.write_text(HAND)
    lm = BackoffNGram.from_arpa(path)
    assert lm.words == ["</s>", "<unk>", "a", "b"] and lm.vocab_size == 4 and lm.order == 2
    got = lm.log_prob(Sequences.from_lists([[2, 3], [3, 2], [1], []])) / LN10
    # a b: -0.2 - 0.3 - 0.25; b a: (bow <s> -0.3 + b -0.7) + (bow b -0.1 + a -0.5) + (bow a -0.2 + </s> -0.8);
    # <unk>: (-0.3 - 1.0) + (no backoff on <unk>: 0 - 0.8); empty: -0.3 - 0.8.
    want = torch.tensor([-0.75, -1.0 - 0.6 - 1.0, -1.3 - 0.8, -1.1], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    swapped = BackoffNGram.from_arpa(path, ["</s>", "<unk>", "b", "a"])  # another id order, same law
    torch.testing.assert_close(swapped.log_prob(Sequences.from_lists([[3, 2], [2, 3]])), lm.log_prob(
        Sequences.from_lists([[2, 3], [3, 2]])), rtol=0, atol=1e-12)


def test_vocabulary_objects_with_tokens_are_accepted(tmp_path):
    class Vocab:
        tokens = ("</s>", "<unk>", "a", "b")

    path = tmp_path / "hand.arpa"
    path.write_text(HAND)
    lm = BackoffNGram.from_arpa(path, Vocab())
    lm.to_arpa(tmp_path / "out.arpa", Vocab())
    assert BackoffNGram.from_arpa(tmp_path / "out.arpa").words == list(Vocab.tokens)


# --- KenLM --------------------------------------------------------------------------------------


@pytest.mark.parametrize("order, smoothing, prune", [c for c in CASES if c[0] >= 2])  # KenLM needs n >= 2
def test_kenlm_scores_our_arpa_like_we_do(tmp_path, order, smoothing, prune):
    kenlm = pytest.importorskip("kenlm")  # version noted in the benchmark record (0.3.0 when written)
    lm = _fit(order, smoothing, prune[:order] if prune else None)
    path = tmp_path / "lm.arpa"
    lm.to_arpa(path, WORDS)
    model = kenlm.Model(str(path))
    theirs = torch.tensor([model.score(" ".join(WORDS[i] for i in s), bos=True, eos=True) for s in TEST],
                          dtype=torch.float64)
    ours = lm.log_prob(Sequences.from_lists(TEST)) / LN10
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)


# --- errors ---------------------------------------------------------------------------------------


def _replace(old, new, text=HAND):
    assert old in text
    return text.replace(old, new, 1)


BAD = [
    ("no data", HAND.replace("\\data\\", "data"), None, r"not an ARPA file: no '\\data\\' line"),
    ("bad count", _replace("ngram 1=5", "ngram 1=five"), 3, r"expected 'ngram 1=<count>'; got 'ngram 1=five'"),
    ("skipped order", _replace("ngram 1=5", "ngram 2=5"), 3, r"expected 'ngram 1=<count>'; got 'ngram 2=5'"),
    ("no counts", _replace("ngram 1=5\nngram 2=4\n", ""), 4, r"expected 'ngram 1=<count>' after '\\data\\'"),
    ("wrong header", _replace("\\1-grams:", "\\2-grams:"), 6, r"expected the section header '\\1-grams:'"),
    ("fields", _replace("-1.0\t<unk>", "-1.0\t<unk> x y"), 9,
     r"expected a 1-gram line: log10 probability, 1 word\(s\), optional log10 backoff; got '-1.0\\t<unk> x y'"),
    ("backoff at top", _replace("-0.4\ta a", "-0.4\ta a\t-0.1"), 17, r"expected a 2-gram line: .* 2 word\(s\); got"),
    ("number", _replace("-0.5\ta", "minus\ta"), 10, r"expected numbers for the log10 probability and backoff"),
    ("nan", _replace("-0.5\ta", "nan\ta"), 10, r"expected log10 values that are not NaN or \+inf"),
    ("fewer", _replace("ngram 2=4", "ngram 2=5"), 18, r"the 2-grams section has 4 entries; '\\data\\' announced 5"),
    ("more", _replace("ngram 1=5", "ngram 1=4"), 11, r"more 1-grams than the 4 announced, or expected the section "
                                                     r"header '\\2-grams:'; got '-0.7\\tb\\t-0.1'"),
    ("no end", HAND.replace("\\end\\\n", ""), None, r"the file ends before '\\end\\' \(after line 18\)"),
    ("junk end", HAND.replace("\\end\\", "the end"), 19, r"more 2-grams than the 4 announced, or expected '\\end\\' after the 2-grams; got 'the end'"),
    ("unknown", _replace("-0.4\ta a", "-0.4\ta c"), 17, r"the word 'c' has no unigram entry"),
    ("start inside", _replace("-0.4\ta a", "-0.4\ta <s>"), 17, r"'<s>' may only begin an n-gram; got it as word 2 of 2"),
    ("end inside", _replace("-0.2\t<s> a", "-0.2\t</s> a"), 14, r"'</s>' may only end an n-gram; got it as word 1"),
    ("twice", _replace("-0.7\tb\t-0.1", "-0.7\ta\t-0.1"), 11, r"the unigram 'a' is listed twice"),
    ("twice 2", _replace("-0.4\ta a", "-0.4\ta b"), 17, r"the 2-gram \[2, 3\] appears twice"),
    ("no eos", _replace("-0.8\t</s>", "-0.8\tc"), None, r"the unigrams do not list '</s>'"),
]


@pytest.mark.parametrize("name, text, line, message", BAD, ids=[b[0] for b in BAD])
def test_malformed_files_raise_one_line_naming_file_and_line(tmp_path, name, text, line, message):
    path = tmp_path / "bad.arpa"
    path.write_text(text)
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    with pytest.raises(ValueError, match=f"^{_escape(where)}{message}") as info:
        BackoffNGram.from_arpa(path)
    assert "\n" not in str(info.value)


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def test_missing_context_names_the_line(tmp_path):
    text = _replace("ngram 2=4\n", "ngram 2=4\nngram 3=1\n").replace(
        "\\end\\", "\\3-grams:\n-0.1\tb a b\n\n\\end\\").replace("-0.4\ta a", "-0.4\ta a\t-0.1")
    path = tmp_path / "bad.arpa"
    path.write_text(text)
    with pytest.raises(ValueError, match=_escape(f"{path}:21: the 3-gram [3, 2, 3] has no entry for its context")):
        BackoffNGram.from_arpa(path)


def test_vocabulary_mismatches_are_named(tmp_path):
    path = tmp_path / "hand.arpa"
    path.write_text(HAND)
    with pytest.raises(ValueError, match=_escape(f"{path}:10: the word 'a' is not in the vocabulary (3 words)")):
        BackoffNGram.from_arpa(path, ["</s>", "<unk>", "b"])
    with pytest.raises(ValueError, match=_escape(f"{path}: 1 vocabulary word(s) have no unigram entry (e.g. 'c')")):
        BackoffNGram.from_arpa(path, ["</s>", "<unk>", "a", "b", "c"])
    with pytest.raises(FileNotFoundError, match="cannot read the ARPA file"):
        BackoffNGram.from_arpa(tmp_path / "absent.arpa")


@pytest.mark.parametrize("words, error, message", [
    (WORDS[:-1], ValueError, r"words: expected 40 words \(one per id\); got 39"),
    (["<unk>", *WORDS[1:]], ValueError, r"words: id 0 is the sentence boundary, so words\[0\] must be '</s>'"),
    ([*WORDS[:-1], "two words"], ValueError, r"words\[39\] must be a non-empty string without whitespace"),
    ([*WORDS[:-1], "<s>"], ValueError, r"words\[39\] must be .* other than '<s>' and '</s>'; got '<s>'"),
    ([*WORDS[:-1], "w2"], ValueError, r"words: 'w2' appears twice \(words\[39\]\)"),
    (" ".join(WORDS), TypeError, r"words: expected a list of word strings"),
])
def test_to_arpa_checks_the_words(tmp_path, words, error, message):
    with pytest.raises(error, match=message):
        _fit(2, "witten_bell").to_arpa(tmp_path / "lm.arpa", words)


def test_to_arpa_digits_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match=r"digits: expected an int >= 1; got 0"):
        _fit(2, "witten_bell").to_arpa(tmp_path / "lm.arpa", WORDS, digits=0)


def test_written_file_is_plain_text(tmp_path):
    path = tmp_path / "lm.arpa"
    _fit(3, "kneser_ney").to_arpa(path, WORDS)
    assert Path(path).read_text(encoding="utf-8").count("\\3-grams:") == 1
