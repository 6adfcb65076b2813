"""Tests for the text readers of ebms.data.text: read_sentences, iter_sentences, split_sentences."""

from __future__ import annotations

import io
import itertools
import os
import threading

import pytest

import ebms.data._text_read as text_read
from ebms.data.text import iter_sentences, read_sentences, split_sentences
from ebms.errors import DataError, LimitExceeded


def _write(tmp_path, text: str, name: str = "corpus.txt", encoding: str = "utf-8"):
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return path


# --- one sentence per line ------------------------------------------------------------------


def test_read_sentences_gives_one_sentence_per_non_blank_line(tmp_path):
    path = _write(tmp_path, "\ufeffThe cat  sat .\r\n\n   \n\tA dog\nlast line without newline")
    assert read_sentences(path) == [["The", "cat", "sat", "."], ["A", "dog"], ["last", "line", "without", "newline"]]
    assert read_sentences(str(path), lower=True)[0] == ["the", "cat", "sat", "."]


def test_char_level_collapses_whitespace_runs_into_one_space_token(tmp_path):
    path = _write(tmp_path, "  ab\t c \n\nÉ!\n")
    assert read_sentences(path, level="char") == [["a", "b", " ", "c"], ["É", "!"]]
    assert read_sentences(path, level="char", lower=True)[1] == ["é", "!"]


def test_iter_sentences_gives_what_read_sentences_gives(tmp_path):
    text = "\ufeffone two\n\nthree\r\nfour  five six\n \n"
    path = _write(tmp_path, text)
    for level in ("word", "char"):
        assert list(iter_sentences(path, level=level)) == read_sentences(path, level=level)
    assert list(iter_sentences(io.StringIO(text))) == [["one", "two"], ["three"], ["four", "five", "six"]]
    assert read_sentences(io.StringIO(text), level="char")[1] == list("three")


def test_a_latin1_file_reads_with_its_encoding(tmp_path):
    path = _write(tmp_path, "Espa\xf1a es\n", encoding="latin-1")
    assert read_sentences(path, encoding="latin-1") == [["España", "es"]]
    assert list(iter_sentences(path, encoding="latin-1")) == [["España", "es"]]


# --- the sentence splitter ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
        ("Mr. Smith met Dr. J. R. Jones. They left.", ["Mr. Smith met Dr. J. R. Jones.", "They left."]),
        ("It cost 3.5 dollars. Then 4. Not e.g. this.", ["It cost 3.5 dollars.", "Then 4.", "Not e.g. this."]),
        ('He said "Go!" Then "Stop." (Really?) [Yes.] Done', ['He said "Go!"', 'Then "Stop."', "(Really?)",
                                                                "[Yes.]", "Done"]),
        ("Wait... What?! ok. lower case continues. Fine", ["Wait...", "What?! ok. lower case continues.", "Fine"]),
        ("A line\nbroken here. Next\n\n\nnew paragraph\nno end\n\nlast", ["A line broken here.", "Next",
                                                                         "new paragraph no end", "last"]),
        ("", []),
        ("  \n\n ", []),
    ],
)
def test_split_sentences_follows_its_documented_rules(text, sentences):
    assert split_sentences(text) == sentences


def test_sentence_split_reads_running_text_the_same_way_from_a_file(tmp_path):
    text = "Mr. Smith came.\nHe left! Did he?\n\nYes. He\ndid.\n"
    path = _write(tmp_path, text)
    expected = [s.split() for s in split_sentences(text)]
    assert expected == [["Mr.", "Smith", "came."], ["He", "left!"], ["Did", "he?"], ["Yes."], ["He", "did."]]
    assert read_sentences(path, sentence_split=True) == expected
    assert list(iter_sentences(path, sentence_split=True)) == expected
    assert read_sentences(path, sentence_split=True, level="char")[0] == list("Mr. Smith came.")


# --- streaming ------------------------------------------------------------------------------


class _EndlessText(io.RawIOBase):
    """A file that never ends (a sentence per line), counting the bytes it hands out."""

    def __init__(self) -> None:
        self.served = 0
        self.lines = (f"sentence number {i} .\n".encode() for i in itertools.count())
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while len(self.pending) < len(buffer):
            self.pending += next(self.lines)
        n = len(buffer)
        buffer[:n], self.pending = self.pending[:n], self.pending[n:]
        self.served += n
        return n


def test_iter_sentences_reads_lazily_from_an_endless_stream():
    raw = _EndlessText()
    stream = io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8")
    first = list(itertools.islice(iter_sentences(stream), 3))
    assert first == [["sentence", "number", str(i), "."] for i in range(3)]
    assert raw.served < 64 * 1024  # a few buffer fills of an endless file


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo (POSIX)")
def test_iter_sentences_reads_a_file_path_lazily_and_closes_it(tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    limit, written = 100 << 20, [0]
    line = b"w " * 50 + b"\n"

    def writer() -> None:
        try:
            with open(fifo, "wb") as f:
                while written[0] < limit:
                    f.write(line)
                    written[0] += len(line)
        except BrokenPipeError:
            pass

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    sentences = iter_sentences(fifo)
    assert [len(s) for s in itertools.islice(sentences, 5)] == [50] * 5
    sentences.close()  # closes the file: the writer's next write fails
    thread.join(timeout=20)
    assert not thread.is_alive()
    assert written[0] < (4 << 20), f"the reader pulled {written[0]} bytes for 5 sentences"


@pytest.mark.slow
def test_iter_sentences_memory_stays_flat_on_a_50_mb_file(tmp_path):
    import tracemalloc

    path = tmp_path / "big.txt"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(500_000):
            f.write(f"the quick brown fox {i} jumps over the lazy dog again and again , said line {i} .\n")
    assert path.stat().st_size > 40 << 20
    tracemalloc.start()
    count = sum(1 for _ in iter_sentences(path))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == 500_000
    assert peak < (2 << 20), f"peak {peak / 2**20:.1f} MiB while streaming a {path.stat().st_size >> 20} MiB file"


# --- errors ---------------------------------------------------------------------------------


def test_missing_file_folder_and_bad_source_are_named(tmp_path):
    for reader in (read_sentences, iter_sentences):
        with pytest.raises(FileNotFoundError, match=r"nope\.txt: no such file; \w+ reads a text file .* check the path"):
            reader(tmp_path / "nope.txt")
        with pytest.raises(IsADirectoryError, match=r": is a folder; \w+ reads one text file"):
            reader(tmp_path)
        with pytest.raises(TypeError, match=r"path: expected a file path or an open text stream; got int"):
            reader(3)
        with pytest.raises(TypeError, match=r"got BytesIO \(open binary files in text mode"):
            reader(io.BytesIO(b"a\n"))


def test_empty_or_blank_file_is_an_error_naming_it(tmp_path):
    for text in ("", "\n \n\t\n"):
        path = _write(tmp_path, text, "empty.txt")
        with pytest.raises(DataError, match=r"empty\.txt: no sentences \(the file is empty or holds only blank lines\)"):
            read_sentences(path)
        with pytest.raises(DataError, match=r"empty\.txt: no sentences"):
            list(iter_sentences(path))
        with pytest.raises(DataError, match=r"empty\.txt: no sentences"):
            read_sentences(path, sentence_split=True)


def test_bad_encoding_is_an_error_naming_the_file_line_and_fix(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes(b"ok line\nEspa\xf1a\n")
    with pytest.raises(DataError, match=r"latin\.txt: line 2 is not valid utf-8 \(invalid continuation byte\); "
                                        r"pass encoding= the file's encoding \(e\.g\. encoding='latin-1'\)"):
        read_sentences(path)
    with pytest.raises(DataError, match=r"latin\.txt: not valid utf-8 text after line \d+ .*encoding='latin-1'"):
        list(iter_sentences(path))
    with pytest.raises(ValueError, match=r"encoding: unknown text encoding 'utf-9'; use a Python codec name"):
        read_sentences(path, encoding="utf-9")


def test_bad_level_limit_and_long_lines_are_errors_with_messages(tmp_path, monkeypatch):
    path = _write(tmp_path, "a b c\n" * 10)
    with pytest.raises(ValueError, match=r"level: expected 'word' or 'char'; got 'chars'"):
        read_sentences(path, level="chars")
    with pytest.raises(ValueError, match=r"level: expected 'word' or 'char'; got 'token'"):
        iter_sentences(path, level="token")  # checked at the call, not at the first next()
    with pytest.raises(LimitExceeded, match=r"corpus\.txt: the file is 60 B .* above the limit max_bytes=10 .*"
                                            r"pass max_bytes=60 to read_sentences"):
        read_sentences(path, max_bytes=10)
    with pytest.raises(ValueError, match=r"max_bytes: expected a number of bytes >= 1; got 0"):
        read_sentences(path, max_bytes=0)
    monkeypatch.setattr(text_read, "MAX_SENTENCE_CHARS", 4)
    with pytest.raises(LimitExceeded, match=r"corpus\.txt: line 1 is longer than 4 characters \(the limit "
                                            r"max_sentence_chars=4\); is it running text\?"):
        list(iter_sentences(path))
    with pytest.raises(LimitExceeded, match=r"corpus\.txt: line 1 is longer than 4 characters"):
        read_sentences(path)  # the default is read at call time by both readers
    with pytest.raises(DataError, match=r"corpus\.txt: a sentence runs past 4 characters \(the limit max_sentence_chars=4\) without an end"):
        list(iter_sentences(_write(tmp_path, "ab\ncd\nef\n"), sentence_split=True))
    with pytest.raises(TypeError, match=r"text: expected a str; got bytes"):
        split_sentences(b"a. B.")


# --- one line check for both readers -------------------------------------------------------------


def _all_readers(path, **kw):
    """The sentences of ``path`` through every reading path: whole file, streamed, from an open stream."""
    with open(path, encoding="utf-8") as stream:
        from_stream = read_sentences(stream, **kw)
    return {"read": read_sentences(path, **kw), "iter": list(iter_sentences(path, **kw)), "stream": from_stream}


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_every_reader_refuses_the_same_over_long_line_and_accepts_one_at_the_limit(tmp_path, newline):
    ok = _write(tmp_path, newline.join(["a b", "c" * 10, "d e f"]) + newline, "ok.txt")  # the longest line: 10 chars
    got = _all_readers(ok, max_sentence_chars=10)
    assert got["read"] == got["iter"] == got["stream"] == [["a", "b"], ["c" * 10], ["d", "e", "f"]]
    long = _write(tmp_path, newline.join(["a b", "c d e", "x" * 11, "g"]) + newline, "long.txt")
    calls = [lambda: read_sentences(long, max_sentence_chars=10), lambda: list(iter_sentences(long, max_sentence_chars=10)),
             lambda: read_sentences(open(long, encoding="utf-8"), max_sentence_chars=10)]  # noqa: SIM115
    for call in calls:
        with pytest.raises(LimitExceeded, match=r"long\.txt: line 3 is longer than 10 characters \(the limit "
                                                r"max_sentence_chars=10\); is it running text\? pass "
                                                r"sentence_split=True, or break it into lines \(or raise "
                                                r"max_sentence_chars\)$"):
            call()


def test_a_long_one_line_file_fails_before_it_is_tokenised(tmp_path):
    import tracemalloc

    path = _write(tmp_path, "ab " * 400_000 + "\n", "one_line.txt")  # 1.2 MB: 400k tokens on one line
    tracemalloc.start()
    with pytest.raises(LimitExceeded, match=r"line 1 is longer than 100000 characters"):
        read_sentences(path, max_sentence_chars=100_000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # the bytes, the text and its one line (about 3.6 MB); tokenised it would be 400k strings (> 20 MB)
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB"


def test_nul_characters_are_refused_by_every_reader_naming_the_line(tmp_path):
    path = _write(tmp_path, "a b\nc\0d e\nf\n", "nul.txt")
    for call in [lambda: read_sentences(path), lambda: list(iter_sentences(path)),
                 lambda: read_sentences(path, sentence_split=True)]:
        with pytest.raises(DataError, match=r"nul\.txt: line 2 holds a NUL character \(column 2\): not a text file "
                                            r"in this encoding"):
            call()
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes("hello world\n".encode("utf-16-le"))  # read as UTF-8: every other byte is NUL
    with pytest.raises(DataError, match=r"utf16\.txt: line 1 holds a NUL character .*UTF-16/UTF-32 text: pass "
                                        r"encoding="):
        read_sentences(utf16)
    assert read_sentences(utf16, encoding="utf-16-le") == [["hello", "world"]]


def test_max_sentence_chars_is_checked_at_the_call():
    with pytest.raises(ValueError, match=r"max_sentence_chars: expected an int >= 1; got 0"):
        read_sentences(io.StringIO("a\n"), max_sentence_chars=0)
    with pytest.raises(TypeError, match=r"max_sentence_chars: expected an int; got 2.5"):
        iter_sentences(io.StringIO("a\n"), max_sentence_chars=2.5)
