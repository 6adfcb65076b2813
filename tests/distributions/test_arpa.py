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
from ebms.errors import DataError
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
    lm = BackoffNGram.from_arpa(path, tolerance=None)  # HAND's unigrams sum to 0.774: not a law, read anyway
    assert lm.words == ["</s>", "<unk>", "a", "b"] and lm.vocab_size == 4 and lm.order == 2
    got = lm.log_prob(Sequences.from_lists([[2, 3], [3, 2], [1], []])) / LN10
    # a b: -0.2 - 0.3 - 0.25; b a: (bow <s> -0.3 + b -0.7) + (bow b -0.1 + a -0.5) + (bow a -0.2 + </s> -0.8);
    # <unk>: (-0.3 - 1.0) + (no backoff on <unk>: 0 - 0.8); empty: -0.3 - 0.8.
    want = torch.tensor([-0.75, -1.0 - 0.6 - 1.0, -1.3 - 0.8, -1.1], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    swapped = BackoffNGram.from_arpa(path, ["</s>", "<unk>", "b", "a"], tolerance=None)  # another id order
    torch.testing.assert_close(swapped.log_prob(Sequences.from_lists([[3, 2], [2, 3]])), lm.log_prob(
        Sequences.from_lists([[2, 3], [3, 2]])), rtol=0, atol=1e-12)


def test_vocabulary_objects_with_tokens_are_accepted(tmp_path):
    class Vocab:
        tokens = ("</s>", "<unk>", "a", "b")

    path = tmp_path / "hand.arpa"
    path.write_text(HAND)
    lm = BackoffNGram.from_arpa(path, Vocab(), tolerance=None)
    lm.to_arpa(tmp_path / "out.arpa", Vocab())
    assert BackoffNGram.from_arpa(tmp_path / "out.arpa", tolerance=None).words == list(Vocab.tokens)


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
    ([*WORDS[:-1], ""], ValueError, r"words\[39\] must be a non-empty string other than '<s>' and '</s>'; got ''"),
    ([*WORDS[:-1], "a<U+0020>b"], ValueError, r"words\[39\] = 'a<U\+0020>b' holds '<U\+0020>', the ARPA spelling "
                                              r"of the whitespace character ' ', .*; rename that token"),
    ([*WORDS[:-1], "a\0b"], ValueError, r"words\[39\] = 'a\\x00b' holds a NUL character"),
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



# --- a normalised hand-written file, and what is not a law ---------------------------------------

L10 = math.log10
# V = 4: unigrams </s> 0.2, <unk> 0.1, a 0.4, b 0.3. Bigrams <s> a 0.6, <s> b 0.3 (backoff of <s>:
# (1 - 0.9) / (1 - 0.7) = 1/3); a b 0.5 (backoff of a: 0.5 / 0.7); b </s> 0.8 (backoff of b: 0.2 / 0.8).
LAW = {"</s>": 0.2, "<unk>": 0.1, "a": 0.4, "b": 0.3, "<s> a": 0.6, "<s> b": 0.3, "a b": 0.5, "b </s>": 0.8}
BOW = {"<s>": 1 / 3, "a": 0.5 / 0.7, "b": 0.25}


def _law_file(law=LAW, bow=BOW):
    uni = [f"{L10(law[w])!r}\t{w}" + (f"\t{L10(bow[w])!r}" if w in bow else "") for w in ("</s>", "<unk>", "a", "b")]
    big = [f"{L10(law[g])!r}\t{g}" for g in ("<s> a", "<s> b", "a b", "b </s>")]
    return "\n".join(["\\data\\", "ngram 1=5", "ngram 2=4", "", "\\1-grams:", f"-99\t<s>\t{L10(bow['<s>'])!r}", *uni,
                      "", "\\2-grams:", *big, "", "\\end\\", ""])


def test_normalised_hand_file_passes_the_check_and_scores_by_hand(tmp_path):
    path = tmp_path / "law.arpa"
    path.write_text(_law_file())
    lm = BackoffNGram.from_arpa(path)  # default tolerance: every history sums to 1
    got = lm.next_log_probs(Sequences.from_lists([[], [2], [3], [1]])).exp()
    want = torch.tensor([[0.2 / 3, 0.1 / 3, 0.6, 0.3],  # after <s>: stored a, b; the rest 1/3 of the unigram
                         [0.2 * 5 / 7, 0.1 * 5 / 7, 0.4 * 5 / 7, 0.5],  # after a: stored b
                         [0.8, 0.1 / 4, 0.4 / 4, 0.3 / 4],  # after b: stored </s>
                         [0.2, 0.1, 0.4, 0.3]], dtype=torch.float64)  # after <unk>: no successors, backoff 1
    torch.testing.assert_close(got, want, rtol=0, atol=1e-14)


@pytest.mark.parametrize("law, bow, line, message", [
    ({**LAW, "a": 0.5}, BOW, 0, "the unigram probabilities sum to 1.1; expected 1 within tolerance=0.001"),
    (LAW, {**BOW, "a": 0.5}, 9, "the probabilities after the history 'a' sum to 0.85 (0.5 from its stored n-grams, "
                                "the rest through its backoff weight)"),  # 0.5 + 0.5 (1 - 0.3)
    (LAW, {**BOW, "<s>": 0.5}, 6, "the probabilities after the history '<s>' sum to 1.05 (0.9 from its stored"),
    (LAW, {**BOW, "<unk>": 0.9}, 8, "the probabilities after the history '<unk>' sum to 0.9 (0 from its stored"),
])
def test_unnormalised_file_is_refused_naming_the_history_and_its_line(tmp_path, law, bow, line, message):
    path = tmp_path / "bad.arpa"
    path.write_text(_law_file(law, bow))
    where = f"{path}:{line}: " if line else f"{path}: "
    with pytest.raises(DataError, match="^" + _escape(where + message) + ".*" + _escape(
            "not a normalised backoff model (pass tolerance=None to read it anyway)")) as info:
        BackoffNGram.from_arpa(path)
    assert "\n" not in str(info.value)
    assert BackoffNGram.from_arpa(path, tolerance=None).order == 2  # the user's choice: read it anyway
    assert BackoffNGram.from_arpa(path, tolerance=0.2).order == 2


def test_positive_log10_probability_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "bad.arpa"
    path.write_text(_replace("-0.5\ta\t-0.2", "0.4\ta\t-0.2"))  # p(a) = 10^0.4 = 2.5
    with pytest.raises(DataError, match="^" + _escape(f"{path}:10: the log10 probability 0.4 is above 0 (a "
                                                      "probability above 1)")):
        BackoffNGram.from_arpa(path, tolerance=None)  # refused even without the normalisation check
    path.write_text(_replace("-0.5\ta\t-0.2", "0.4\ta\t-0.2").replace("-0.4\ta a", "1e-9\ta a"))  # float32 rounding
    with pytest.raises(DataError, match=r":10: the log10 probability 0.4"):
        BackoffNGram.from_arpa(path, tolerance=None)
    path.write_text(_replace("-0.4\ta a", "1e-9\ta a"))  # p = 1 + 2.3e-9: a rounded 1, accepted
    assert BackoffNGram.from_arpa(path, tolerance=None).num_ngrams == (4, 4)


def test_positive_backoff_weights_are_a_law(tmp_path):
    # a backoff weight above 1 is legitimate (little lower-order mass left to share): 0.4 + 3 (1 - 0.8) = 1
    law = {**LAW, "a b": 0.4, "b": 0.8, "a": 0.05, "<unk>": 0.05, "</s>": 0.1, "<s> b": 0.6, "<s> a": 0.05}
    bow = {"<s>": 0.35 / 0.15, "a": 3.0, "b": 0.2 / 0.9}
    path = tmp_path / "law.arpa"
    path.write_text(_law_file(law, bow))
    lm = BackoffNGram.from_arpa(path)
    assert bool((lm.ngrams(1)[2] > 0).any())  # a log backoff above 0 was read
    torch.testing.assert_close(lm.next_log_probs(Sequences.from_lists([[2]])).exp().sum(), torch.tensor(
        1.0, dtype=torch.float64), rtol=0, atol=1e-12)


def test_constructor_refuses_probabilities_above_one_and_unnormalised_tables():
    ids = [torch.arange(3)[:, None], torch.tensor([[0, 1], [1, 2]])]
    with pytest.raises(ValueError, match=r"^log_probs\[1\]: row 1 \(\[1, 2\]\) has the log-probability 0.5 > 0, a "
                                         r"probability above 1; expected natural logs <= 0$"):
        BackoffNGram(3, ids, [torch.tensor([0.5, 0.25, 0.25]).log(), torch.tensor([-0.1, 0.5])])
    lp = [torch.tensor([0.5, 0.25, 0.25]).log(), torch.tensor([0.5, 0.5]).log()]
    # after <s>: stored 1 (0.5), backoff 1 on the rest (1 - 0.25): 1.25
    with pytest.raises(ValueError, match=_escape("log_probs, backoffs: ngrams[0] row 0: the probabilities after the "
                                                 "history [<s>] sum to 1.25 (0.5 from its stored n-grams") + ".*" +
                       _escape("expected 1 within tolerance=0.001 (pass tolerance=None to skip this check)")):
        BackoffNGram(3, ids, lp)
    bows = [torch.tensor([0.5 / 0.75, 0.5 / 0.75, 1.0]).log(), torch.zeros(2)]  # row 0 is <s>, row 1 is id 1
    ok = BackoffNGram(3, ids, lp, bows)
    torch.testing.assert_close(ok.next_log_probs(Sequences.from_lists([[], [1], [2]])).exp().sum(-1),
                               torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-6)
    assert BackoffNGram(3, ids, lp, tolerance=None).order == 2


# --- bytes that are not an ARPA text --------------------------------------------------------------


def test_non_utf8_file_is_one_line_naming_the_line_and_byte_offset(tmp_path):
    path = tmp_path / "latin1.arpa"
    text = _law_file().replace("\ta\t", "\t\u00e9\t").replace("\ta b", "\t\u00e9 b").replace("<s> a", "<s> \u00e9")
    path.write_bytes(text.encode("latin-1"))
    offset = text.encode("latin-1").index(b"\xe9")
    with pytest.raises(DataError, match="^" + _escape(f"{path}:9: not UTF-8 text: byte 0xe9 at byte offset {offset} "
                                                      "(invalid continuation byte); ARPA files are read as UTF-8: "
                                                      "convert the file")) as info:
        BackoffNGram.from_arpa(path)
    assert "\n" not in str(info.value)
    path.write_bytes(text.encode("utf-8"))  # the same in UTF-8 reads
    assert BackoffNGram.from_arpa(path).words == ["</s>", "<unk>", "\u00e9", "b"]


def test_nul_bytes_and_binary_models_are_refused(tmp_path):
    path = tmp_path / "nul.arpa"
    text = _law_file().replace("\tb\t", "\tb\0\t").encode()
    path.write_bytes(text)
    at = text.index(b"\0")
    with pytest.raises(DataError, match="^" + _escape(f"{path}:10: a NUL byte at byte offset {at}: not "
                                                      "an ARPA text file")):
        BackoffNGram.from_arpa(path)
    path.write_bytes(b"mmap lm http://kheafield.com/code format version 5\n\0\0\0\1")
    with pytest.raises(DataError, match="KenLM's build_binary output"):
        BackoffNGram.from_arpa(path)


def test_byte_order_mark_and_compressed_files_are_read(tmp_path):
    import bz2
    import gzip
    import lzma

    plain = _law_file().encode()
    want = BackoffNGram.from_arpa(_write(tmp_path / "plain.arpa", plain)).log_prob(Sequences.from_lists([[2, 3]]))
    for name, data in [("bom.arpa", b"\xef\xbb\xbf" + plain), ("lm.arpa.gz", gzip.compress(plain)),
                       ("lm.arpa.bz2", bz2.compress(plain)), ("lm.arpa.xz", lzma.compress(plain))]:
        got = BackoffNGram.from_arpa(_write(tmp_path / name, data)).log_prob(Sequences.from_lists([[2, 3]]))
        assert torch.equal(got, want), name
    broken = _write(tmp_path / "broken.arpa.gz", gzip.compress(plain)[:-30])
    with pytest.raises(DataError, match=_escape(f"{broken}:") + r"\d+: the compressed file is corrupt or truncated"):
        BackoffNGram.from_arpa(broken)


def _write(path, data):
    path.write_bytes(data)
    return path


# --- whitespace tokens: a character-level model ----------------------------------------------------

CHARS = ["</s>", "<unk>", " ", "a", "b", "\t", "x y", "<U+0041>"]  # space, tab, a token holding a space


def _char_model(order=3):
    rng = random.Random(5)
    corpus = [[rng.choice([2, 3, 4, 2, 3, 5, 6, 7]) for _ in range(rng.randrange(1, 9))] for _ in range(300)]
    return BackoffNGram.fit(Sequences.from_lists(corpus), len(CHARS), order, smoothing="witten_bell")


def test_whitespace_tokens_round_trip_through_the_file(tmp_path):
    lm = _char_model()
    path = tmp_path / "chars.arpa"
    lm.to_arpa(path, CHARS)
    text = path.read_text(encoding="utf-8")
    import re

    assert re.search("\t<U\\+0020>[\t\n]", text) and re.search("\tx<U\\+0020>y[\t\n]", text) and "\t<U+0009>" in text
    assert all(len(line.split("\t")) <= 3 for line in text.splitlines())
    assert "<U+0041>" in text  # not whitespace: written and read as itself
    back = BackoffNGram.from_arpa(path)
    assert back.words == ["</s>", "<unk>", " ", "a", "b", "\t", "x y", "<U+0041>"]
    assert back.num_ngrams == lm.num_ngrams
    for m in range(1, 4):
        assert torch.equal(back.ngrams(m)[0], lm.ngrams(m)[0])
        torch.testing.assert_close(back.ngrams(m)[1], lm.ngrams(m)[1], rtol=5.0001e-7, atol=0)
    again = tmp_path / "again.arpa"
    BackoffNGram.from_arpa(path, CHARS).to_arpa(again, CHARS)
    assert again.read_bytes() == path.read_bytes()


def test_kenlm_scores_the_escaped_space_token_like_we_do(tmp_path):
    kenlm = pytest.importorskip("kenlm")
    from ebms.distributions._arpa import escape_word

    lm = _char_model()
    path = tmp_path / "chars.arpa"
    lm.to_arpa(path, CHARS)
    model = kenlm.Model(str(path))
    test = [[2, 3, 2, 4], [6, 2, 5], [7, 7, 2], [2]]
    theirs = torch.tensor([model.score(" ".join(escape_word(CHARS[i]) for i in s), bos=True, eos=True)
                           for s in test], dtype=torch.float64)
    torch.testing.assert_close(lm.log_prob(Sequences.from_lists(test)) / LN10, theirs, rtol=0, atol=1e-4)
