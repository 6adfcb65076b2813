"""Atomic, pickle-free checkpoints: one safetensors file + one JSON commit record.

Layout of a checkpoint folder (``run_dir/checkpoints``)::

    ckpt-000000100-3f2a9c0d1e4b5a67.safetensors   weights (model/..., objective/..., optimizer/...)
    ckpt-000000100.json                           config, step, RNG states, metrics, sha256 of the weights
    latest                                        text: the name of the newest committed JSON

Write order (each file: temp file in the same folder, ``fsync``, ``os.replace``,
then ``fsync`` of the folder):

1. the weights, named after their own sha256 so that rewriting a step never
   touches a file an older JSON refers to;
2. the JSON — its appearance *commits* the checkpoint;
3. the ``latest`` pointer.

A crash at any point leaves the previous committed checkpoint and the pointer
intact: at worst an orphan weights file or a ``.tmp`` file remains, and the
next successful save removes it. Loading reads bytes and parses them with
``safetensors`` and ``json`` only (nothing is unpickled), and checks size,
sha256 and the key set before returning, so a truncated or altered file raises
a ``ValueError`` that names the file and what is wrong.

One writer per folder (under ``torchrun`` only rank 0 writes).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
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

__all__ = ["Checkpoint", "CheckpointStore"]

FORMAT = "ebms-checkpoint"
VERSION = 1
POINTER = "latest"
_JSON_RE = re.compile(r"^ckpt-(\d{9})\.json$")


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint as read from disk.

    Attributes:
        path: the JSON commit record.
        step: training step the state belongs to.
        tensors: ``{prefixed key: CPU tensor}`` from the safetensors file.
        meta: the JSON record (config, RNG states, metrics, ...).
    """

    path: Path
    step: int
    tensors: dict[str, Tensor]
    meta: dict[str, Any]


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
    """Saves and loads checkpoints in one folder (see the module docstring for the layout).

    Args:
        folder: where checkpoints live; created on the first save.
        keep: number of most recent checkpoints to keep (``None``: keep all).
            The one ``latest`` names is never deleted.

    Example::

        store = CheckpointStore(run_dir / "checkpoints")
        store.save(100, {"model/w": w}, {"note": "anything JSON"})
        ckpt = store.load()          # latest; ckpt.tensors["model/w"], ckpt.meta["note"]
    """

    def __init__(self, folder: str | Path, *, keep: int | None = 3) -> None:
        self.folder = Path(folder)
        self.keep = None if keep is None else check_int(keep, "keep", minimum=1)

    # ------------------------------------------------------------------ writing

    def save(self, step: int, tensors: Mapping[str, Tensor], meta: Mapping[str, Any]) -> Path:
        """Write one checkpoint atomically and point ``latest`` at it; returns the JSON path.

        Args:
            step: training step (``>= 0``), used in the file names.
            tensors: ``{key: tensor}``; keys are stored as given (prefix them,
                e.g. ``model/...``). Tensors are copied to contiguous CPU memory.
            meta: JSON-serialisable record (strict JSON: no NaN/Inf). The keys
                ``format``, ``version``, ``step``, ``weights`` and ``created``
                are added here.
        """
        check_int(step, "step", minimum=0)
        reserved = {"format", "version", "step", "weights", "created"} & set(meta)
        if reserved:
            raise ValueError(f"meta: keys {sorted(reserved)} are reserved for the checkpoint record")
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
            "weights": {"file": weights.name, "sha256": digest, "bytes": len(data), "keys": sorted(flat)},
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **meta,
        }
        try:
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
        records = self.checkpoints()
        if self.keep is not None:
            for old in records[: max(0, len(records) - self.keep)]:
                if old != current:
                    old.unlink(missing_ok=True)
        referenced = set()
        for rec in self.checkpoints():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                referenced.add(json.loads(rec.read_text())["weights"]["file"])
        for w in self.folder.glob("ckpt-*.safetensors"):
            if w.name not in referenced:
                w.unlink(missing_ok=True)

    # ------------------------------------------------------------------ reading

    def checkpoints(self) -> list[Path]:
        """Committed JSON records in the folder, oldest step first."""
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if _JSON_RE.match(p.name))

    def latest(self) -> Path | None:
        """The JSON record ``latest`` points to, or ``None`` when there is no pointer."""
        pointer = self.folder / POINTER
        if not pointer.is_file():
            return None
        name = pointer.read_text().strip()
        if not _JSON_RE.match(name):
            raise ValueError(f"{pointer}: expected the name of a checkpoint JSON; got {name!r}")
        return self.folder / name

    def load(self, which: int | str | Path | None = None) -> Checkpoint:
        """Read and verify a checkpoint.

        Args:
            which: ``None`` or ``"latest"`` (the pointer), a step number, or the
                path of a JSON record.

        Raises:
            ValueError: the record or weights are missing, truncated, altered
                (sha256 mismatch), not valid JSON/safetensors, or their keys differ.
        """
        path = self._resolve(which)
        meta = self._read_record(path)
        w = meta["weights"]
        wpath = path.parent / w["file"]
        if not wpath.is_file():
            raise ValueError(f"{wpath}: weights file named by {path.name} is missing")
        data = wpath.read_bytes()
        if len(data) != w["bytes"]:
            kind = "truncated" if len(data) < w["bytes"] else "longer than recorded"
            raise ValueError(f"{wpath}: file is {kind}: expected {w['bytes']} bytes, found {len(data)}")
        digest = hashlib.sha256(data).hexdigest()
        if digest != w["sha256"]:
            raise ValueError(
                f"{wpath}: sha256 mismatch: recorded {w['sha256']}, computed {digest} "
                "(the file was modified or corrupted after it was written)"
            )
        try:
            tensors = safetensors.torch.load(data)
        except Exception as err:  # safetensors raises its own error types
            raise ValueError(f"{wpath}: not a valid safetensors file ({err})") from None
        missing = sorted(set(w["keys"]) - set(tensors))
        extra = sorted(set(tensors) - set(w["keys"]))
        if missing or extra:
            raise ValueError(f"{wpath}: keys differ from {path.name}: missing {missing}, unexpected {extra}")
        return Checkpoint(path=path, step=meta["step"], tensors=tensors, meta=meta)

    def _resolve(self, which: int | str | Path | None) -> Path:
        if which is None or which == "latest":
            path = self.latest()
            if path is None:
                found = [p.name for p in self.checkpoints()]
                hint = f"; records present: {found} (pass one explicitly)" if found else ""
                raise ValueError(f"{self.folder}: no checkpoint ('{POINTER}' pointer not found){hint}")
            return path
        if isinstance(which, int) and not isinstance(which, bool):
            return self.folder / f"ckpt-{check_int(which, 'which', minimum=0):09d}.json"
        if isinstance(which, (str, Path)):
            path = Path(which)
            if path.suffix != ".json":
                raise ValueError(f"which: expected a checkpoint .json record; got {str(path)!r}")
            return path
        raise TypeError(f"which: expected None, 'latest', a step or a .json path; got {which!r}")

    @staticmethod
    def _read_record(path: Path) -> dict[str, Any]:
        if not path.is_file():
            raise ValueError(f"{path}: checkpoint record (JSON) is missing; the checkpoint was never committed or was deleted")
        try:
            meta = json.loads(path.read_bytes())
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: not valid JSON (truncated or corrupted?): {err}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"{path}: not an ebms checkpoint record (expected format {FORMAT!r})")
        if meta.get("version") != VERSION:
            raise ValueError(f"{path}: checkpoint format version {meta.get('version')!r}; this ebms reads {VERSION}")
        w = meta.get("weights")
        ok = (
            isinstance(meta.get("step"), int)
            and isinstance(w, dict)
            and isinstance(w.get("file"), str)
            and "/" not in w["file"]
            and isinstance(w.get("sha256"), str)
            and isinstance(w.get("bytes"), int)
            and isinstance(w.get("keys"), list)
        )
        if not ok:
            raise ValueError(f"{path}: malformed record: expected 'step' and 'weights' {{file, sha256, bytes, keys}}")
        return meta
