"""Atomic, pickle-free checkpoints: one safetensors file + one JSON commit record.

Layout of a checkpoint folder (``run_dir/checkpoints``)::

    ckpt-000000100-3f2a9c0d1e4b5a67.safetensors   weights (model/..., objective/..., optimizer/...)
    ckpt-000000100.json                           identity, config, step, RNG states, metrics,
                                                  sha256 of the weights and of the record itself
    latest                                        text: the name of the newest committed JSON

Write order (each file: temp file in the same folder, ``fsync``, ``os.replace``,
then ``fsync`` of the folder):

1. the weights, named after their own sha256 so that rewriting a step never
   touches a file an older JSON refers to;
2. the JSON — its appearance *commits* the checkpoint;
3. the ``latest`` pointer.

A crash at any point leaves the previous committed checkpoint and the pointer
intact: at worst an orphan weights file or a ``.tmp`` file remains, and the
next successful save removes it.

**Integrity.** The record carries ``record_sha256``, the sha256 of its own
canonical JSON (keys sorted, no spaces, that key left out), and the size and
sha256 of the weights file. Loading reads bytes and parses them with
``safetensors`` and ``json`` only (nothing is unpickled), and checks the record
hash, the step, the weights' size, hash and key set before returning, so a
truncated, edited or corrupted file raises :class:`~ebms.errors.CheckpointError`
naming the file and what is wrong. The hashes detect accidents (a disk error, a
hand edit, a half-copied folder); they are not a signature against someone who
rewrites both files on purpose.

**Identity.** ``save(..., identity=...)`` stores the settings that say *what*
the checkpoint is a checkpoint of (model, data, objective ...), as a flat
``{key: JSON value}``; ``load(..., identity=...)`` refuses a checkpoint whose
stored value differs for any key present on both sides, with one line naming
every differing key. A key present on one side only is not compared (a setting
added to a later version of the program does not orphan older runs).

**Recovery.** ``load()`` (latest) reads the record ``latest`` names and, when
the pointer is missing or unreadable or that checkpoint is damaged, the other
records newest first, skipping damaged ones with a warning on the
``ebms.train`` logger. A checkpoint of another run (identity mismatch) is never
skipped over: that is a mix-up the user must resolve.

**Retention.** With ``keep=k`` a save deletes the records of older steps beyond
the ``k`` newest, but only after the new checkpoint has been read back and
verified, so the newest valid checkpoint is never the one deleted. Records of
*later* steps (left by resuming from an older checkpoint) are left alone until
training reaches and rewrites that step.

One writer per folder (under ``torchrun`` only rank 0 writes).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.errors import CheckpointError

__all__ = ["Checkpoint", "CheckpointStore", "identity_differences"]

logger = logging.getLogger("ebms.train")

FORMAT = "ebms-checkpoint"
VERSION = 2
POINTER = "latest"
DIGEST = "record_sha256"
RESERVED = frozenset({"format", "version", "step", "weights", "created", "identity", DIGEST})
_JSON_RE = re.compile(r"^ckpt-(\d{9})\.json$")


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint as read from disk.

    Attributes:
        path: the JSON commit record.
        step: training step the state belongs to.
        tensors: ``{prefixed key: CPU tensor}`` from the safetensors file.
        meta: the JSON record (identity, config, RNG states, metrics, ...).
    """

    path: Path
    step: int
    tensors: dict[str, Tensor]
    meta: dict[str, Any]

    @property
    def identity(self) -> dict[str, Any]:
        """The settings the checkpoint was trained under (``{}`` when none were given)."""
        ident = self.meta.get("identity")
        return dict(ident) if isinstance(ident, dict) else {}


def canonical_digest(record: Mapping[str, Any]) -> str:
    """sha256 of ``record`` as canonical JSON (sorted keys, no spaces), ``record_sha256`` left out."""
    body = {k: v for k, v in record.items() if k != DIGEST}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def identity_differences(stored: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    """``key=stored (here expected)`` for every key present in both mappings whose values differ."""
    return [
        f"{k}={stored[k]!r} (here {expected[k]!r})"
        for k in sorted(set(stored) & set(expected))
        if stored[k] != expected[k]
    ]


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a folder be opened
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _jsonable_identity(identity: Mapping[str, Any] | None) -> dict[str, Any]:
    try:
        return json.loads(json.dumps(dict(identity or {}), allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"identity: expected a flat JSON-serialisable mapping; {err}") from None


class CheckpointStore:
    """Saves, verifies and loads checkpoints in one folder (see the module docstring).

    Args:
        folder: where checkpoints live; created on the first save.
        keep: number of most recent checkpoints to keep (``None``: keep all).
            Older ones are deleted only after the new one has been verified.

    Example::

        store = CheckpointStore(run_dir / "checkpoints")
        store.save(100, {"model/w": w}, {"note": "anything JSON"}, identity={"data.name": "moons"})
        ckpt = store.load(identity={"data.name": "moons"})   # newest valid; ckpt.tensors["model/w"]
    """

    def __init__(self, folder: str | Path, *, keep: int | None = 3) -> None:
        self.folder = Path(folder)
        self.keep = None if keep is None else check_int(keep, "keep", minimum=1)

    # ------------------------------------------------------------------ writing

    def save(self, step: int, tensors: Mapping[str, Tensor], meta: Mapping[str, Any], *,
             identity: Mapping[str, Any] | None = None) -> Path:
        """Write one checkpoint atomically and point ``latest`` at it; returns the JSON path.

        Args:
            step: training step (``>= 0``), used in the file names.
            tensors: ``{key: tensor}``; keys are stored as given (prefix them,
                e.g. ``model/...``). Tensors are copied to contiguous CPU memory.
            meta: JSON-serialisable record (strict JSON: no NaN/Inf). The keys
                in ``RESERVED`` (``format``, ``version``, ``step``, ``weights``,
                ``created``, ``identity``, ``record_sha256``) are added here.
            identity: flat ``{setting: JSON value}`` the checkpoint was made
                under; :meth:`load` compares it.
        """
        check_int(step, "step", minimum=0)
        reserved = RESERVED & set(meta)
        if reserved:
            raise ValueError(f"meta: keys {sorted(reserved)} are reserved for the checkpoint record")
        ident = _jsonable_identity(identity)
        self.folder.mkdir(parents=True, exist_ok=True)
        for tmp in self.folder.glob(".*.tmp"):  # leftovers of an interrupted save
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        flat = {k: t.detach().to("cpu", copy=True, memory_format=torch.contiguous_format) for k, t in tensors.items()}
        data = safetensors.torch.save(flat, metadata={"format": "pt", "step": str(step)})
        digest = hashlib.sha256(data).hexdigest()
        weights = self.folder / f"ckpt-{step:09d}-{digest[:16]}.safetensors"
        record = {
            "format": FORMAT,
            "version": VERSION,
            "step": step,
            "identity": ident,
            "weights": {"file": weights.name, "sha256": digest, "bytes": len(data), "keys": sorted(flat)},
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **meta,
        }
        try:
            record[DIGEST] = canonical_digest(record)
            text = json.dumps(record, allow_nan=False, indent=1)
        except (TypeError, ValueError) as err:
            raise ValueError(f"meta: expected strict JSON (no NaN/Inf, no objects); {err}") from None
        _atomic_write(weights, data)
        path = self.folder / f"ckpt-{step:09d}.json"
        _atomic_write(path, text.encode())  # commit
        _atomic_write(self.folder / POINTER, (path.name + "\n").encode())
        self._collect_garbage(path)
        return path

    def _collect_garbage(self, current: Path) -> None:
        """Apply ``keep`` to older steps once ``current`` verifies; drop unreferenced weights."""
        step = int(current.name[5:14])
        try:
            self._load_one(current)
        except CheckpointError as err:  # never trade the older checkpoints for an unreadable one
            logger.warning("checkpoint %s did not verify after writing (%s); older checkpoints kept", current, err)
            return
        if self.keep is not None:
            older = [p for p in self.checkpoints() if int(p.name[5:14]) < step]
            for old in older[: max(0, len(older) - (self.keep - 1))]:
                old.unlink(missing_ok=True)
        referenced = set()
        for rec in self.checkpoints():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                referenced.add(json.loads(rec.read_text())["weights"]["file"])
        for w in self.folder.glob("ckpt-*.safetensors"):
            if w.name not in referenced:
                w.unlink(missing_ok=True)

    def clear(self) -> None:
        """Delete every checkpoint file of this folder (records, weights, pointer, temp files).

        Other files are left alone. Used when a run is deliberately started again
        (``overwrite``).
        """
        if not self.folder.is_dir():
            return
        for p in self.folder.iterdir():
            name = p.name
            ours = _JSON_RE.match(name) or (name.startswith("ckpt-") and name.endswith(".safetensors"))
            if ours or name == POINTER or (name.startswith(".") and name.endswith(".tmp")):
                p.unlink(missing_ok=True)

    # ------------------------------------------------------------------ reading

    def checkpoints(self) -> list[Path]:
        """Committed JSON records in the folder, oldest step first."""
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if _JSON_RE.match(p.name))

    def has_any(self) -> bool:
        """Whether the folder holds any checkpoint file at all (record, weights or pointer)."""
        if not self.folder.is_dir():
            return False
        return any(
            _JSON_RE.match(p.name) or p.name == POINTER or (p.name.startswith("ckpt-") and p.name.endswith(".safetensors"))
            for p in self.folder.iterdir()
        )

    def latest(self) -> Path | None:
        """The JSON record ``latest`` points to, or ``None`` when there is no pointer.

        Raises:
            CheckpointError: the pointer does not hold a checkpoint record name.
        """
        pointer = self.folder / POINTER
        if not pointer.is_file():
            return None
        try:
            name = pointer.read_text().strip()
        except (OSError, UnicodeDecodeError) as err:
            raise CheckpointError(f"{pointer}: unreadable ({err})") from None
        if not _JSON_RE.match(name):
            raise CheckpointError(f"{pointer}: expected the name of a checkpoint JSON; got {name!r}")
        return self.folder / name

    def load(self, which: int | str | Path | None = None, *, identity: Mapping[str, Any] | None = None) -> Checkpoint:
        """Read and verify a checkpoint.

        Args:
            which: ``None`` or ``"latest"`` (the newest valid one: the pointer's,
                else the newest record that verifies), a step number, or the
                path of a JSON record.
            identity: settings the checkpoint must have been made under; every
                key present both here and in the record must have the same value.

        Raises:
            CheckpointError: no checkpoint; the record or weights are missing,
                truncated, altered (sha256 mismatch), not valid JSON/safetensors,
                or their keys differ; or the identity differs.
        """
        if which is None or which == "latest":
            ckpt = self._load_newest_valid()
        else:
            ckpt = self._load_one(self._resolve(which))
        if identity is not None:
            self.check_identity(ckpt, identity)
        return ckpt

    @staticmethod
    def check_identity(ckpt: Checkpoint, identity: Mapping[str, Any]) -> None:
        """Raise :class:`CheckpointError` naming every setting in which ``ckpt`` differs from ``identity``."""
        expected = _jsonable_identity(identity)
        if expected and not ckpt.identity:
            raise CheckpointError(
                f"{ckpt.path}: the checkpoint records no settings it was trained under, so it cannot be "
                "matched to this run; use a checkpoint written by this run"
            )
        diff = identity_differences(ckpt.identity, expected)
        if diff:
            raise CheckpointError(
                f"{ckpt.path}: checkpoint of another run: trained with {', '.join(diff)}; "
                "use the run folder it belongs to, or start a new run"
            )

    def _load_newest_valid(self) -> Checkpoint:
        """The pointer's checkpoint, else the newest record that verifies.

        What was skipped is logged as warnings only when a checkpoint is found;
        when none is, the one error raised says why (the newest failure).
        """
        notes: list[str] = []
        pointer_error: CheckpointError | None = None
        try:
            pointed = self.latest()
        except CheckpointError as err:
            notes.append(f"{err}; looking for the newest valid checkpoint instead")
            pointed, pointer_error = None, err
        candidates = ([pointed] if pointed is not None else []) + [
            p for p in reversed(self.checkpoints()) if p != pointed
        ]
        if not candidates and pointer_error is not None:
            raise pointer_error
        if not candidates:
            raise CheckpointError(f"{self.folder}: no checkpoint (no '{POINTER}' pointer and no ckpt-*.json record)")
        if pointed is None and not notes:
            notes.append(f"{self.folder}: no '{POINTER}' pointer; using the newest checkpoint record that verifies")
        failures: list[CheckpointError] = []
        for path in candidates:
            try:
                ckpt = self._load_one(path)
            except CheckpointError as err:
                failures.append(err)
                notes.append(f"skipping damaged checkpoint: {err}")
                continue
            for note in notes:
                logger.warning("%s", note)
            if failures:
                logger.warning("using %s, the newest checkpoint that verifies", path)
            return ckpt
        if len(failures) == 1:
            raise failures[0]
        raise CheckpointError(
            f"{self.folder}: none of the {len(failures)} checkpoints verifies; newest: {failures[0]}"
        )

    def _resolve(self, which: int | str | Path) -> Path:
        if isinstance(which, int) and not isinstance(which, bool):
            return self.folder / f"ckpt-{check_int(which, 'which', minimum=0):09d}.json"
        if isinstance(which, (str, Path)):
            path = Path(which)
            if path.suffix != ".json":
                raise ValueError(f"which: expected a checkpoint .json record; got {str(path)!r}")
            return path
        raise TypeError(f"which: expected None, 'latest', a step or a .json path; got {which!r}")

    def _load_one(self, path: Path) -> Checkpoint:
        meta = self._read_record(path)
        w = meta["weights"]
        wpath = path.parent / w["file"]
        try:
            data = wpath.read_bytes()
        except FileNotFoundError:
            raise CheckpointError(f"{wpath}: weights file named by {path.name} is missing") from None
        except OSError as err:
            raise CheckpointError(f"{wpath}: unreadable ({err})") from None
        if len(data) != w["bytes"]:
            kind = "truncated" if len(data) < w["bytes"] else "longer than recorded"
            raise CheckpointError(f"{wpath}: file is {kind}: expected {w['bytes']} bytes, found {len(data)}")
        digest = hashlib.sha256(data).hexdigest()
        if digest != w["sha256"]:
            raise CheckpointError(
                f"{wpath}: sha256 mismatch: recorded {w['sha256']}, computed {digest} "
                "(the file was modified or corrupted after it was written)"
            )
        try:
            tensors = safetensors.torch.load(data)
        except Exception as err:  # safetensors raises its own error types
            raise CheckpointError(f"{wpath}: not a valid safetensors file ({err})") from None
        missing = sorted(set(w["keys"]) - set(tensors))
        extra = sorted(set(tensors) - set(w["keys"]))
        if missing or extra:
            raise CheckpointError(f"{wpath}: keys differ from {path.name}: missing {missing}, unexpected {extra}")
        return Checkpoint(path=path, step=meta["step"], tensors=tensors, meta=meta)

    @staticmethod
    def _read_record(path: Path) -> dict[str, Any]:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise CheckpointError(
                f"{path}: checkpoint record (JSON) is missing; the checkpoint was never committed or was deleted"
            ) from None
        except OSError as err:
            raise CheckpointError(f"{path}: unreadable ({err})") from None
        try:
            meta = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
            raise CheckpointError(f"{path}: not valid JSON (truncated or corrupted?): {err}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise CheckpointError(f"{path}: not an ebms checkpoint record (expected format {FORMAT!r})")
        if meta.get("version") != VERSION:
            raise CheckpointError(
                f"{path}: checkpoint format version {meta.get('version')!r}; this ebms reads version {VERSION} "
                "(records with a checksum of their own); retrain, or load it with the ebms that wrote it"
            )
        recorded = meta.get(DIGEST)
        try:
            computed = canonical_digest(meta)
        except ValueError:  # NaN/Inf constants are not strict JSON: not something save() wrote
            computed = "(not strict JSON)"
        if recorded != computed:
            raise CheckpointError(
                f"{path}: record sha256 mismatch: recorded {recorded}, computed {computed} "
                "(the JSON record was edited or corrupted after it was written)"
            )
        w = meta.get("weights")
        step = meta.get("step")
        ok = (
            isinstance(step, int)
            and not isinstance(step, bool)
            and isinstance(w, dict)
            and isinstance(w.get("file"), str)
            and "/" not in w["file"]
            and "\\" not in w["file"]
            and isinstance(w.get("sha256"), str)
            and isinstance(w.get("bytes"), int)
            and isinstance(w.get("keys"), list)
            and isinstance(meta.get("identity"), dict)
        )
        if not ok or not isinstance(step, int):
            raise CheckpointError(
                f"{path}: malformed record: expected 'step', 'identity' and 'weights' {{file, sha256, bytes, keys}}"
            )
        named = _JSON_RE.match(path.name)
        if step < 0 or (named is not None and int(named.group(1)) != step):
            raise CheckpointError(f"{path}: record says step {step}, which does not match its file name")
        return meta
