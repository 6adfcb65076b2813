"""Private helpers: nested state <-> (JSON skeleton, flat tensor dict), and RNG states.

A training state (``model.state_dict()``, ``objective.state_dict()``,
``optimizer.state_dict()``) is a tree of dicts, lists, tuples, numbers and
tensors. :func:`flatten_state` splits it into

* a JSON-able *skeleton* in which every tensor is replaced by
  ``{"__tensor__": key}``, and
* a flat ``{key: tensor}`` dict whose keys are the tree paths joined by ``/``
  (``"model/mean"``, ``"optimizer/state/0/exp_avg"``): the prefixed keys of
  the one safetensors file.

Dicts whose keys are not plain strings (the optimizer's ``{param_id: ...}``),
tuples (Adam's ``betas``) and non-finite floats are tagged so that
:func:`unflatten_state` rebuilds the exact same Python values; nothing is ever
pickled.

RNG states (the trainer's ``torch.Generator``, torch's global CPU/CUDA
generators, Python's ``random`` and NumPy's legacy global generator) are
captured as ``bytes`` blobs and stored base64-encoded in the checkpoint JSON.
"""

from __future__ import annotations

import base64
import json
import math
import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ebms.errors import CheckpointError

TENSOR = "__tensor__"
ITEMS = "__items__"
TUPLE = "__tuple__"
FLOAT = "__float__"
_TAGS = (TENSOR, ITEMS, TUPLE, FLOAT)


def flatten_state(tree: Any, prefix: str, *, copy: bool = True) -> tuple[Any, dict[str, Tensor]]:
    """Split ``tree`` into a JSON skeleton and CPU copies of its tensors (keys ``prefix/...``; no prefix: ``""``).
    ``copy=False``: contiguous CPU tensors are the tree's own (for a caller that is done with them before
    the state changes, such as a checkpoint write)."""
    tensors: dict[str, Tensor] = {}

    def join(path: str, key: Any) -> str:
        return f"{path}/{key}" if path else str(key)

    def enc(obj: Any, path: str) -> Any:
        if isinstance(obj, Tensor):
            if path in tensors:
                raise ValueError(f"{path}: two entries of the state map to the same key")
            tensors[path] = obj.detach().to("cpu", copy=copy, memory_format=torch.contiguous_format)
            return {TENSOR: path}
        if isinstance(obj, Mapping):
            if all(isinstance(k, str) and not k.startswith("__") for k in obj):
                return {k: enc(v, join(path, k)) for k, v in obj.items()}
            return {ITEMS: [[enc(k, join(path, "<key>")), enc(v, join(path, k))] for k, v in obj.items()]}
        if isinstance(obj, tuple):
            return {TUPLE: [enc(v, join(path, i)) for i, v in enumerate(obj)]}
        if isinstance(obj, list):
            return [enc(v, join(path, i)) for i, v in enumerate(obj)]
        if obj is None or isinstance(obj, (bool, int, str)):
            return obj
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else {FLOAT: repr(obj)}
        raise TypeError(
            f"{path}: cannot store a {type(obj).__name__} in a checkpoint "
            "(expected tensors, numbers, strings, None, lists, tuples or dicts)"
        )

    return enc(tree, prefix), tensors


def unflatten_state(skeleton: Any, tensors: Mapping[str, Tensor], where: str) -> Any:
    """Inverse of :func:`flatten_state`; ``where`` names the file in error messages."""

    def dec(obj: Any) -> Any:
        if isinstance(obj, dict):
            if len(obj) == 1:
                (tag, val), = obj.items()
                if tag == TENSOR:
                    if val not in tensors:
                        raise CheckpointError(f"{where}: missing tensor key {val!r} in the weights file")
                    return tensors[val]
                if tag == ITEMS:
                    return {dec(k): dec(v) for k, v in val}
                if tag == TUPLE:
                    return tuple(dec(v) for v in val)
                if tag == FLOAT:
                    return float(val)
            return {k: dec(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [dec(v) for v in obj]
        return obj

    return dec(skeleton)


# ----------------------------------------------------------------------------- RNG states


def _byte_tensor(blob: bytes) -> Tensor:
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).clone()


def capture_rng(generator: torch.Generator) -> dict[str, bytes]:
    """Every RNG stream a training step may touch, as bytes blobs."""
    blobs = {
        "generator": generator.get_state().numpy().tobytes(),
        "torch_cpu": torch.get_rng_state().numpy().tobytes(),
    }
    if generator.device.type == "cuda":
        blobs["torch_cuda"] = torch.cuda.get_rng_state(generator.device).numpy().tobytes()
    version, words, gauss = random.getstate()
    blobs["python"] = json.dumps([version, list(words), gauss]).encode()
    name, key, pos, has_gauss, cached = np.random.get_state(legacy=True)  # type: ignore[misc]
    blobs["numpy"] = json.dumps([name, [int(k) for k in key], int(pos), int(has_gauss), float(cached)]).encode()
    return blobs


def restore_rng(blobs: Mapping[str, bytes], generator: torch.Generator, where: str) -> None:
    """Set every RNG stream from :func:`capture_rng` blobs."""
    missing = {"generator", "torch_cpu", "python", "numpy"} - set(blobs)
    if generator.device.type == "cuda":
        missing |= {"torch_cuda"} - set(blobs)
    if missing:
        raise CheckpointError(f"{where}: RNG state lacks {sorted(missing)}")
    try:
        generator.set_state(_byte_tensor(blobs["generator"]))
        torch.set_rng_state(_byte_tensor(blobs["torch_cpu"]))
        if generator.device.type == "cuda":
            torch.cuda.set_rng_state(_byte_tensor(blobs["torch_cuda"]), generator.device)
        version, words, gauss = json.loads(blobs["python"])
        random.setstate((version, tuple(words), gauss))
        name, key, pos, has_gauss, cached = json.loads(blobs["numpy"])
        np.random.set_state((name, np.asarray(key, dtype=np.uint32), pos, has_gauss, cached))
    except (RuntimeError, ValueError, TypeError) as err:
        raise CheckpointError(f"{where}: RNG state is malformed ({err})") from None


def encode_blobs(blobs: Mapping[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode("ascii") for k, v in blobs.items()}


def decode_blobs(encoded: Any, where: str) -> dict[str, bytes]:
    if not isinstance(encoded, dict):
        raise CheckpointError(f"{where}: RNG state must be a JSON object; got {type(encoded).__name__}")
    try:
        return {k: base64.b64decode(v, validate=True) for k, v in encoded.items()}
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"{where}: RNG state is not valid base64 ({err})") from None
