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

**Integrity and identity.** Every record carries the sha256 of itself and of
its weights, checked on every load, and the settings the checkpoint was trained
under, compared by ``load(..., identity=...)``; the record format and these
checks live in :mod:`ebms.train._checkpoint_record` (its docstring has the details).

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
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from ebms._checks import check_int
from ebms.errors import CheckpointError
from ebms.train import _checkpoint_record as _record
from ebms.train._checkpoint_record import DIGEST as DIGEST
from ebms.train._checkpoint_record import FORMAT as FORMAT
from ebms.train._checkpoint_record import RESERVED as RESERVED
from ebms.train._checkpoint_record import VERSION as VERSION
from ebms.train._checkpoint_record import Checkpoint, identity_differences
from ebms.train._checkpoint_record import canonical_digest as canonical_digest

__all__ = ["Checkpoint", "CheckpointStore", "identity_differences"]
# DIGEST, FORMAT, RESERVED, VERSION and canonical_digest are imported "as" themselves: the record
# format's names stay reachable here, where they lived before it moved to _checkpoint_record.

logger = logging.getLogger("ebms.train")

POINTER = "latest"
_JSON_RE = _record.RECORD_RE  # the file name of a committed record


def _step_of(record: Path) -> int:
    """The step in a committed record's file name (``ckpt-000000100.json`` -> 100)."""
    return int(_JSON_RE.match(record.name).group(1))  # type: ignore[union-attr]  # names from checkpoints() match


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


class CheckpointStore:
    """Saves, verifies and loads checkpoints in one folder (see the module docstring).

    Args:
        folder: where checkpoints live; created on the first save.
        keep: number of most recent checkpoints to keep (``None``, the default: keep all).
            Older ones are deleted only after the new one has been verified.

    Example::

        store = CheckpointStore(run_dir / "checkpoints")
        store.save(100, {"model/w": w}, {"note": "anything JSON"}, identity={"data.name": "moons"})
        ckpt = store.load(identity={"data.name": "moons"})   # newest valid; ckpt.tensors["model/w"]
    """

    def __init__(self, folder: str | Path, *, keep: int | None = None) -> None:
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
        ident = _record.check_meta(meta, identity)
        self.folder.mkdir(parents=True, exist_ok=True)
        for tmp in self.folder.glob(".*.tmp"):  # leftovers of an interrupted save
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        name, data, text = _record.encode(step, tensors, meta, ident)
        weights = self.folder / name
        _atomic_write(weights, data)
        path = self.folder / _record.record_name(step)
        _atomic_write(path, text)  # commit
        _atomic_write(self.folder / POINTER, (path.name + "\n").encode())
        self._collect_garbage(path)
        return path

    def _collect_garbage(self, current: Path) -> None:
        """Apply ``keep`` to older steps once ``current`` verifies; drop unreferenced weights."""
        step = _step_of(current)
        try:
            self._load_one(current)
        except CheckpointError as err:  # never trade the older checkpoints for an unreadable one
            logger.warning("checkpoint %s did not verify after writing (%s); older checkpoints kept", current, err)
            return
        if self.keep is not None:
            older = [p for p in self.checkpoints() if _step_of(p) < step]
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

    def steps(self) -> list[int]:
        """The steps of the committed records (:meth:`checkpoints`), oldest first, read from their file names."""
        return [_step_of(p) for p in self.checkpoints()]

    def has_any(self) -> bool:
        """Whether the folder holds any checkpoint file at all (record, weights or pointer)."""
        if not self.folder.is_dir():
            return False
        return any(
            _JSON_RE.match(p.name) or p.name == POINTER or (p.name.startswith("ckpt-") and p.name.endswith(".safetensors"))
            for p in self.folder.iterdir()
        )

    def has_checkpoint(self) -> bool:
        """Whether the folder holds a committed checkpoint (a JSON record or the ``latest`` pointer).

        Weights without a record are the remains of a write that was killed before it committed
        (the record is written last): they count for :meth:`has_any` (a fresh start refuses to wipe
        them) but give nothing to resume from.
        """
        if not self.folder.is_dir():
            return False
        return any(_JSON_RE.match(p.name) or p.name == POINTER for p in self.folder.iterdir())

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
        _record.check_identity(ckpt, identity)

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
            return self.folder / _record.record_name(check_int(which, "which", minimum=0))
        if isinstance(which, (str, Path)):
            path = Path(which)
            if path.suffix != ".json":
                raise ValueError(f"which: expected a checkpoint .json record; got {str(path)!r}")
            return path
        raise TypeError(f"which: expected None, 'latest', a step or a .json path; got {which!r}")

    def _load_one(self, path: Path) -> Checkpoint:
        """Read and verify the checkpoint whose record is ``path`` (format checks: ``_checkpoint_record``)."""
        return _record.read_checkpoint(path)
