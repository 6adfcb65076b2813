"""Files a run keeps beside its checkpoints, checksummed in them (vocabularies, fitted maps).

A task whose trained weights only make sense with something fitted to its data (the token ids of
a vocabulary, a tag list, the longest sentence, word classes, the identity of a base run) returns
those as ``{file name: bytes}`` from its ``run_files(cfg, data)``. ``ebms train`` writes them into
the run folder and records the sha256 of each in every checkpoint's identity, under
``file.<name>`` (:func:`file_identity`); resuming, ``eval`` and ``sample`` read them back
(:func:`read_run_files`, which refuses a missing or altered file with one line) and hand them to
the task's ``load(cfg, stored=...)``, which uses them instead of fitting again.

The JSON payloads are written canonically (:func:`dump_json`: sorted keys, UTF-8, no spaces), so
the same content always has the same sha256, and :func:`stored_json` reads one back checking its
``format`` and ``version``. :func:`fingerprint` hashes encoded training data: a task records it
in its file and refuses, on reload, training data that no longer encodes to it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ebms.data.text import Vocabulary
from ebms.data.vocab import WordVocabulary
from ebms.errors import CheckpointError, DataError

__all__ = ["FILE_PREFIX", "changed_data", "dump_json", "file_identity", "fingerprint", "read_run_files",
           "stored_json", "stored_strings", "stored_vocabulary", "stored_word_vocabulary", "write_run_files"]

#: prefix of the identity keys that hold a run file's sha256 (``file.vocab.json``).
FILE_PREFIX = "file."


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_identity(files: Mapping[str, bytes]) -> dict[str, str]:
    """``{"file.<name>": sha256 hex}`` of each file: what a checkpoint records of them."""
    return {f"{FILE_PREFIX}{name}": _sha256(data) for name, data in sorted(files.items())}


def write_run_files(run_dir: str | os.PathLike[str], files: Mapping[str, bytes]) -> list[Path]:
    """Write each file into ``run_dir`` (a temporary name, then a rename: never half a file)."""
    out = []
    for name, data in sorted(files.items()):
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"files: expected plain file names; got {name!r}")
        path = Path(run_dir) / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        out.append(path)
    return out


def read_run_files(run_dir: str | os.PathLike[str], identity: Mapping[str, Any]) -> dict[str, bytes]:
    """The files a checkpoint's ``identity`` names (``file.<name>``), read from ``run_dir`` and checked.

    Raises:
        CheckpointError: a named file is missing, or its sha256 is not the recorded one (edited,
            replaced or damaged since the run was trained).
    """
    out = {}
    for key in sorted(k for k in identity if k.startswith(FILE_PREFIX)):
        name, want = key[len(FILE_PREFIX):], identity[key]
        path = Path(run_dir) / name
        if not path.is_file():
            raise CheckpointError(f"{path}: missing; the run's checkpoints were trained with this file (sha256 "
                                  f"{str(want)[:12]}...): restore it from a copy of the run folder, or train the run "
                                  f"again (--overwrite)")
        data = path.read_bytes()
        if _sha256(data) != want:
            raise CheckpointError(f"{path}: altered since the run was trained (sha256 {_sha256(data)[:12]}..., the "
                                  f"checkpoints record {str(want)[:12]}...); restore it from a copy of the run folder, "
                                  f"or train the run again (--overwrite)")
        out[name] = data
    return out


def dump_json(payload: Mapping[str, Any]) -> bytes:
    """``payload`` as canonical JSON bytes (sorted keys, UTF-8, no spaces, newline-terminated)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


def stored_json(files: Mapping[str, bytes], name: str, fmt: str, version: int = 1) -> dict[str, Any]:
    """The JSON run file ``name`` of ``files`` (as :func:`read_run_files` returned them), checked.

    Raises:
        CheckpointError: ``name`` is absent, not JSON, or of another ``format``/``version``.
    """
    if name not in files:
        raise CheckpointError(f"{name}: the run's checkpoints record no such file (trained by another version of "
                              f"ebms?); train the run again (--overwrite)")
    try:
        payload = json.loads(files[name].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{name}: not a JSON run file ({err}); train the run again (--overwrite)") from None
    if not isinstance(payload, dict) or payload.get("format") != fmt or payload.get("version") != version:
        got = (payload.get("format"), payload.get("version")) if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(f"{name}: expected format {fmt!r} version {version}; got {got}: train the run again "
                              f"(--overwrite)")
    return payload


def fingerprint(*tensors: Tensor) -> str:
    """sha256 of the tensors' shapes, dtypes and values (CPU, contiguous): a fingerprint of encoded data."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().to("cpu").contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")  # = t.numpy().tobytes(), any dtype
    return h.hexdigest()


def stored_strings(payload: Mapping[str, Any], key: str, name: str) -> list[str]:
    """``payload[key]``, a list of strings, from the run file ``name``; anything else is a :class:`CheckpointError`."""
    value = payload.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CheckpointError(f"{name}: expected a list of strings under {key!r}; got {type(value).__name__}: train "
                              f"the run again (--overwrite)")
    return value


def stored_word_vocabulary(payload: Mapping[str, Any], name: str, *, chars: bool) -> WordVocabulary:
    """The :class:`~ebms.data.vocab.WordVocabulary` of the stored ``words`` (and ``chars``) lists."""
    vocab = WordVocabulary([])  # then its documented attributes, as stored
    vocab.words = stored_strings(payload, "words", name)
    vocab.word_index = {w: i for i, w in enumerate(vocab.words)}
    if chars:
        vocab.chars = stored_strings(payload, "chars", name)
        vocab.char_index = {c: i for i, c in enumerate(vocab.chars)}
    return vocab


def stored_vocabulary(payload: Mapping[str, Any], name: str, *, level: str) -> Vocabulary:
    """The :class:`~ebms.data.text.Vocabulary` of the stored ``tokens`` (ids in order), ``counts`` and ``level``
    (a language run's), which must be ``level`` (the run's ``language.level``); anything else is a
    :class:`CheckpointError`."""
    try:
        tokens, counts = payload["tokens"], payload["counts"]
        vocab = Vocabulary(tokens[2:], level=payload["level"], counts=counts)
        if list(vocab.tokens) != tokens or vocab.level != level:
            raise ValueError(f"tokens {tokens[:2]} at ids 0, 1 or level {payload['level']!r} (language.level="
                             f"{level!r})")
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{name}: not a vocabulary this run can use ({e}); train the run again "
                              f"(--overwrite)") from None
    return vocab


def changed_data(key: str, what: str, name: str) -> DataError:
    """The one-line error of training data that no longer encodes to what a run recorded in ``name``."""
    return DataError(f"{key}: {what} are not the ones this run was trained on (encoded with the run's stored {name}, "
                     f"they differ from the recorded ones); a run keeps its vocabulary and training data: restore "
                     f"the file(s), or train a new run")
