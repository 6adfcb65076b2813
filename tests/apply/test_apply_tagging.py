"""``ebms.apply.tagging``: reading tagging input, and a trained run's tagger (issue 27).

The tagger of a run decodes as ``ebms eval`` does (same encoding, same batches, same Viterbi), and
loading a run takes its word, character, attribute and tag lists from its ``vocab.json``: nothing
is fitted again to the training file (checked by making every fitting function fail). Tiny runs on
a CoNLL-2000-format corpus of their own keep this fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _apply_data import conll_corpus as _corpus
from _apply_data import write_conll2000

from ebms.apply.tagging import SentenceTagger, TagResult, looks_like_tags, read_tagging_input
from ebms.cli.main import main
from ebms.data.conll import Sentence, read_conll, to_iob2
from ebms.errors import DataError
from ebms.metrics.tagger_eval import decode_tags
from ebms.runs import load_run

KINDS = {
    "cnn-crf": ["model.kind=cnn-crf", "tagging.embedding_dim=8", "tagging.hidden=8", "tagging.char_dim=4",
                "train.steps=3", "train.batch_size=8", "train.lr=0.05"],
    "feature-crf": ["model.kind=feature-crf", "train.optimizer=lbfgs", "train.batch_size=50", "train.steps=2"],
    "jrf": ["model.kind=jrf", "jrf.label_fraction=0.5", "jrf.embed=4", "jrf.hidden=4", "train.steps=2",
            "train.batch_size=4"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``runs/<kind>`` for each of :data:`KINDS`, trained on ``conll2000/{train,test}.txt`` of the same folder."""
    root = tmp_path_factory.mktemp("apply-tag")
    write_conll2000(root, _corpus(50, 0), _corpus(20, 1))
    for kind, extra in KINDS.items():
        assert main(["train", "data.name=conll2000", f"data.root={root}", f"run.out_dir={root}/runs",
                     "run.progress=false", "objective.kind=crf", f"run.name={kind}", "--no-eval", *extra]) == 0
    return root


# -- reading the input ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "fmt", "columns", "lengths"), [
    ("He PRP B-NP\nran VBD B-VP\n\n. . O\n", "conll", 3, [2, 1]),  # blank lines between multi-line sentences
    ("He PRP B-NP\nran VBD B-VP\n", "conll", 3, [2]),  # one sentence, no blank line: the last column is tags
    ("-DOCSTART- -X- O\n\nHe B-NP\n", "conll", 2, [1]),  # a -DOCSTART- line opens CoNLL
    ("He ran .\nThe cat sat on the mat\n", "tokens", 1, [3, 6]),
    ("He ran\nThe cat\n", "tokens", 1, [2, 2]),  # the same width but no tags: plain tokens
    ("He ran .\n\nThe cat\n", "tokens", 1, [3, 0, 2]),  # blank lines between one-line blocks: an empty sentence
    ("word\n", "tokens", 1, [1]),
])
def test_auto_detects_conll_and_plain_tokens(text: str, fmt: str, columns: int, lengths: list[int]) -> None:
    inp = read_tagging_input(text.splitlines(), source="FILE 'x'")
    assert (inp.format, inp.columns, [len(s) for s in inp.sentences]) == (fmt, columns, lengths)


def test_a_forced_format_is_kept_and_tokens_keep_their_rows() -> None:
    inp = read_tagging_input(["He ran", "The cat"], fmt="conll")
    assert inp.format == "conll" and inp.sentences[0].tokens == (("He", "ran"), ("The", "cat"))
    inp = read_tagging_input(["He PRP B-NP"], fmt="tokens")
    assert inp.sentences == [Sentence((("He",), ("PRP",), ("B-NP",)))]


@pytest.mark.parametrize(("lines", "fmt", "match"), [
    ([], "auto", r"^FILE 'x': no tokens \(the input is empty\)"),
    (["", "  "], "tokens", r"^FILE 'x': no tokens"),
    (["a b c", "d e"], "conll", r"^FILE 'x': not CoNLL: line 2: expected 3 fields; got 2 in 'd e' \(every token line"),
])
def test_bad_input_names_the_source(lines: list[str], fmt: str, match: str) -> None:
    with pytest.raises(DataError, match=match):
        read_tagging_input(lines, fmt=fmt, source="FILE 'x'")
    with pytest.raises(ValueError, match="fmt: expected one of auto, conll, tokens; got 'xml'"):
        read_tagging_input(["a"], fmt="xml")


def test_looks_like_tags() -> None:
    assert looks_like_tags(["O", "B-NP", "I-NP", "S-LOC", "B"])
    assert not looks_like_tags(["O", "NN"]) and not looks_like_tags([]) and not looks_like_tags(["IN"])


# -- a run's tagger ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_tagger_decodes_as_eval(kind: str, runs: Path) -> None:
    """The test split's tags are :func:`decode_tags` of the inputs ``eval`` encoded (as IOB2), whatever the batch."""
    run = load_run(runs / "runs" / kind)
    tagger = run.applier("tag")
    test = read_conll((runs / "conll2000" / "test.txt").read_text().splitlines())
    model, split = (run.model.tagger, None) if kind == "jrf" else (run.model, run.data.test["test"])
    inputs, lengths = ((run.data.test["words"],), run.data.test["lengths"]) if split is None else (split.inputs,
                                                                                                  split.lengths)
    kw = {"constrained": True} if kind == "cnn-crf" else {}
    want = [to_iob2(t) for t in decode_tags(model, inputs, lengths, run.data.info["tags"], model_kwargs=kw)]
    rows = test if kind == "feature-crf" else [s.words for s in test]
    assert run.tag(rows) == want
    assert tagger.tag(test, batch_size=3) == want  # tiny models: the same tags from smaller batches


def test_run_tag_takes_tokens_and_keeps_empty_and_one_token_sentences(runs: Path) -> None:
    run = load_run(runs / "runs" / "cnn-crf")
    got = run.tag([["the", "cat", "sat"], [], ["mat"], ("unseen-word", "42")])
    assert [len(t) for t in got] == [3, 0, 1, 2] and all(t in run.data.info["tags"] for s in got for t in s)
    assert run.tag([[]]) == [[]] and run.tag([]) == []
    jrf = load_run(runs / "runs" / "jrf")  # words only: unknown words are <unk>, digits map to 0, as at evaluation
    assert jrf.tag([["zzz", "17", "the"]]) == jrf.tag([["qqq", "42", "the"]])
    with pytest.raises(TypeError, match=r"sentences\[1\]: expected a list of tokens \(str\) or of column tuples; "
                                        r"got str 'the cat'"):
        run.tag([["a"], "the cat"])


def test_a_feature_crf_needs_the_pos_column(runs: Path) -> None:
    run = load_run(runs / "runs" / "feature-crf")
    assert len(run.tag([[("the", "DT"), ("cat", "NN")]])[0]) == 2
    with pytest.raises(DataError, match=r"^sentences: model.kind='feature-crf' "
                                        r"\(tagging.features='crfsuite-chunking'\) reads the word \(column 1\) and POS "
                                        r"\(column 2\) of every token; the input has 1 column"):
        run.tag([["the", "cat"]])
    tagger: SentenceTagger = run.applier("tag")
    inp = read_tagging_input(["the cat"], fmt="tokens", source="stdin")
    with pytest.raises(DataError, match=r"^stdin: plain tokens, but model.kind='feature-crf' .* reads the word and "
                                        r"POS"):
        tagger.tag_input(inp)


def test_tag_input_scores_against_the_gold_column(runs: Path) -> None:
    run = load_run(runs / "runs" / "feature-crf")
    text = (runs / "conll2000" / "test.txt").read_text().splitlines()
    result: TagResult = run.applier("tag").tag_input(read_tagging_input(text, source="FILE 't'"))
    figures = run.data.test["test"]
    assert result.gold_column == 3 and result.scores is not None and result.scores.n_true > 0
    assert result.scores.n_true == sum(t.startswith("B-") for s in figures.gold for t in to_iob2(s))
    assert result.summary().startswith(f"chunk F1 {result.scores.f1:.2f}, precision ")
    assert list(result.conll_lines())[:2] == [f"{text[0]} {result.tags[0][0]}", f"{text[1]} {result.tags[0][1]}"
                                              if result.tags[0][1:] else ""]
    no_gold = read_tagging_input([" ".join(line.split()[:2]) for line in text], source="x")
    assert run.applier("tag").tag_input(no_gold).scores is None


# -- issue 27 item 2: a run's maps come from vocab.json, never refitted --------------------------------------------
@pytest.mark.parametrize("kind", list(KINDS))
def test_loading_a_run_fits_nothing_again(kind: str, runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With every function that fits a map to the training sentences made to fail, the run loads from its
    ``vocab.json`` (word, character, attribute and tag lists) and tags as before."""
    path = runs / "runs" / kind
    sentences = [["the", "cat", "sat", "on", "the", "mat"], ["dog", "ran", "42"]]
    if kind == "feature-crf":
        sentences = [[(w, "NN") for w in s] for s in sentences]
    before = load_run(path).tag(sentences)

    import ebms.data.vocab
    from ebms.structured.features import AttributeVocabulary

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a map was fitted to the training sentences again")

    init, flat = ebms.data.vocab.WordVocabulary.__init__, AttributeVocabulary.encode_flat
    monkeypatch.setattr(ebms.data.vocab.WordVocabulary, "__init__",
                        lambda self, sents, **kw: never() if len(sents) else init(self, sents, **kw))
    monkeypatch.setattr(AttributeVocabulary, "encode_flat",
                        lambda self, seqs, grow=False: never() if grow else flat(self, seqs))
    monkeypatch.setattr("ebms.cli.tagging.tag_names", never)
    monkeypatch.setattr("ebms.cli.jrf.tag_names", never)
    run = load_run(path)
    stored = json.loads((path / "vocab.json").read_text())
    maps = run.data.info["maps"]
    assert maps["tags"] == stored["tags"] == run.applier("tag").tag_names
    keys = {"cnn-crf": ("words", "chars"), "feature-crf": ("attributes",), "jrf": ("words",)}[kind]
    for key in keys:
        assert maps[key] == stored[key] and len(stored[key]) > 2, key
    assert run.tag(sentences) == before


# -- applied without the training files (Task.load_applied) --------------------------------------------------------
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_run_applied_without_its_training_files_tags_as_with_them(kind: str, runs: Path) -> None:
    """``load_run(training_data=False)`` (what ``ebms tag`` loads) builds the tagger from ``vocab.json`` and the
    checkpoint alone: with the training folder moved away, the same weights (the feature CRF's masks included)
    and the same tags as the full load."""
    path = runs / "runs" / kind
    test = read_conll((runs / "conll2000" / "test.txt").read_text().splitlines())
    rows = [*(test if kind == "feature-crf" else [s.words for s in test]), []]
    full = load_run(path)
    (runs / "conll2000").rename(runs / "conll2000.away")
    try:
        light = load_run(path, training_data=False)
    finally:
        (runs / "conll2000.away").rename(runs / "conll2000")
    assert light.data.size == 0 and light.data.info["tags"] == full.data.info["tags"]
    light_state, full_state = light.model.state_dict(), full.model.state_dict()
    assert light_state.keys() == full_state.keys()
    assert all(torch.equal(light_state[k], full_state[k]) for k in full_state)
    assert light.tag(rows) == full.tag(rows)
    assert light.applier("tag").tag(test, batch_size=3) == full.applier("tag").tag(test, batch_size=3)


def test_a_jrf_file_without_its_length_counts_takes_the_full_load_and_keeps_its_bytes(runs: Path) -> None:
    """A JRF run written before ``vocab.json`` kept the length law: no light build (its ``L`` is the longest
    training sentence), and the full load with that file gives it back unchanged (a resume's checksums hold)."""
    from ebms.cli.run import serving_task
    from ebms.train.run_files import dump_json

    run = load_run(runs / "runs" / "jrf")
    task = serving_task(run.config)
    payload = json.loads((runs / "runs" / "jrf" / "vocab.json").read_text())
    assert payload["length_counts"] == run.data.info["length_counts"].tolist()
    old = {"vocab.json": dump_json({k: v for k, v in payload.items() if k != "length_counts"})}
    assert task.load_applied(run.config, old) is None
    assert task.run_files(run.config, task.load(run.config, stored=old)) == old


def test_the_word_vocabulary_encodes_no_sentence() -> None:
    from ebms.data.vocab import WordVocabulary

    words, chars = WordVocabulary([]).encode([], chars=True)
    assert words.shape == (0, 0) and chars.shape == (0, 0, 0)
