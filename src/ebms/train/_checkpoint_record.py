"""Private: the on-disk checkpoint record (format ``ebms-checkpoint``, version 2).

One checkpoint is a safetensors file of weights plus one JSON commit record
(:class:`~ebms.train.checkpoint.CheckpointStore` decides where they go and
when). This module turns a state into those two byte strings and turns them
back into a verified :class:`Checkpoint`; it does no folder bookkeeping.

The record is a JSON object holding ``format``, ``version``, ``step``,
``identity``, ``weights`` (``{file, sha256, bytes, keys}``), ``created``,
``record_sha256`` and whatever else the caller put in ``meta`` (config, RNG
states, metrics ...).

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
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import safetensors.torch
from torch import Tensor

from ebms.errors import CheckpointError

FORMAT = "ebms-checkpoint"
VERSION = 2
DIGEST = "record_sha256"
RESERVED = frozenset({"format", "version", "step", "weights", "created", "identity", DIGEST})
RECORD_RE = re.compile(r"^ckpt-(\d{9})\.json$")


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

    def state(self, prefix: str = "model") -> dict[str, Tensor]:
        """The tensors saved under ``prefix/`` with the prefix removed: the ``state_dict`` of that part of the
        training state (``ckpt.state()`` loads into the model, ``ckpt.state("objective")`` into the objective)."""
        head = f"{prefix}/"
        return {k[len(head):]: v for k, v in self.tensors.items() if k.startswith(head)}

    def weights(self, *, average: bool = False) -> dict[str, Tensor]:
        """The model's ``state_dict``: the trained weights, or with ``average`` the weight average that
        ``Trainer(ema=...)`` keeps (:class:`~ebms.train.ema.WeightAverage`).

        Raises:
            CheckpointError: ``average`` and the checkpoint holds none (trained without ``ema``).
        """
        if not average:
            return self.state()
        state = self.state("ema")
        if not state:
            raise CheckpointError(f"{self.path}: the checkpoint holds no weight average (trained without ema); "
                                  "use its trained weights (ebms: eval.ema=false)")
        return state

    @property
    def identity(self) -> dict[str, Any]:
        """The settings the checkpoint was trained under (``{}`` when none were given)."""
        ident = self.meta.get("identity")
        return dict(ident) if isinstance(ident, dict) else {}


def record_name(step: int) -> str:
    """File name of the JSON record of ``step`` (``ckpt-000000100.json``)."""
    return f"ckpt-{step:09d}.json"


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


def jsonable_identity(identity: Mapping[str, Any] | None) -> dict[str, Any]:
    """``identity`` as it reads back from JSON (tuples become lists); ``ValueError`` when it is not JSON."""
    try:
        return json.loads(json.dumps(dict(identity or {}), allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"identity: expected a flat JSON-serialisable mapping; {err}") from None


def check_identity(ckpt: Checkpoint, identity: Mapping[str, Any]) -> None:
    """Raise :class:`CheckpointError` naming every setting in which ``ckpt`` differs from ``identity``."""
    expected = jsonable_identity(identity)
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


def check_meta(meta: Mapping[str, Any], identity: Mapping[str, Any] | None) -> dict[str, Any]:
    """Refuse ``meta`` keys the record sets itself; return ``identity`` in its JSON form."""
    reserved = RESERVED & set(meta)
    if reserved:
        raise ValueError(f"meta: keys {sorted(reserved)} are reserved for the checkpoint record")
    return jsonable_identity(identity)


def encode(step: int, tensors: Mapping[str, Tensor], meta: Mapping[str, Any],
           identity: dict[str, Any]) -> tuple[str, bytes, bytes]:
    """Serialise one checkpoint: ``(weights file name, weights bytes, JSON record bytes)``.

    The weights file is named after the step and the first 16 hex digits of its
    own sha256, so rewriting a step never touches a file an older record names.
    ``identity`` is the output of :func:`check_meta`. Cost: one copy of every
    tensor that is not contiguous CPU memory of its own (a view of part of a storage, or a storage another
    key holds too: safetensors refuses shared storage), the serialised bytes, and two sha256 passes.
    """
    flat: dict[str, Tensor] = {}
    storages: set[int] = set()
    for k, t in tensors.items():
        c = t.detach().to("cpu").contiguous()
        store = c.untyped_storage()
        if store.data_ptr() in storages or store.nbytes() != c.nbytes or c.data_ptr() != store.data_ptr():
            c = c.clone()
        storages.add(c.untyped_storage().data_ptr())
        flat[k] = c
    # One metadata key only: safetensors writes a multi-key metadata map in a per-process random
    # order (a Rust HashMap), which would give the same weights a different sha256 and file name
    # in every process. The step lives in the JSON record.
    data = safetensors.torch.save(flat, metadata={"format": "pt"})
    digest = hashlib.sha256(data).hexdigest()
    weights = f"ckpt-{step:09d}-{digest[:16]}.safetensors"
    record = {
        "format": FORMAT,
        "version": VERSION,
        "step": step,
        "identity": identity,
        "weights": {"file": weights, "sha256": digest, "bytes": len(data), "keys": sorted(flat)},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **meta,
    }
    try:
        record[DIGEST] = canonical_digest(record)
        text = json.dumps(record, allow_nan=False, indent=1)
    except (TypeError, ValueError) as err:
        raise ValueError(f"meta: expected strict JSON (no NaN/Inf, no objects); {err}") from None
    return weights, data, text.encode()


def read_checkpoint(path: Path) -> Checkpoint:
    """Read the record at ``path`` and the weights it names, verifying both (see the module docstring).

    Raises:
        CheckpointError: the record or weights are missing, unreadable,
            truncated, altered, not valid JSON/safetensors, or their keys differ.
    """
    meta = read_record(path)
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


def read_record(path: Path) -> dict[str, Any]:
    """The verified JSON record at ``path`` (format, version, ``record_sha256``, shape, step vs. file name).

    Raises:
        CheckpointError: naming ``path`` and the first check that fails.
    """
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
    named = RECORD_RE.match(path.name)
    if step < 0 or (named is not None and int(named.group(1)) != step):
        raise CheckpointError(f"{path}: record says step {step}, which does not match its file name")
    return meta
