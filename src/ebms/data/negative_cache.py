r"""Offline negatives for residual EBM training: ``S`` base-LM continuations per prefix, on disk.

Deng, Bakhtin, Ott, Szlam & Ranzato (2020, *Residual energy-based models for text generation*,
ICLR) draw the negatives of their conditional NCE once, before training: ``S`` continuations
(16 or 128) of every training prefix from the frozen base LM, then at each step one stored
negative per positive, uniformly. :class:`NegativeCache` holds them:

* :meth:`NegativeCache.build` draws ``S`` continuations of each prefix from a base LM (anything
  with ``sample(n, generator=, max_length=, temperature=, top_k=, top_p=, prefix=, truncate=)``,
  in eval mode) under the horizon law (``horizon=K``: the next at most ``K`` tokens, draws still
  running cut at ``K``; ``None``: to ``</s>``), in batches of about ``batch_size`` draws, with a
  progress bar when there are more than a few batches;
* :meth:`NegativeCache.draw` picks ``nu`` of the ``S`` stored samples of each requested prefix
  uniformly with replacement, in the n-per-prefix layout (row ``b``'s draws at ``b nu .. b nu + nu - 1``);
* :meth:`NegativeCache.save` / :meth:`NegativeCache.load`: one ``.safetensors`` file (four int64
  tensors) with the settings as JSON in its header metadata, written to a temporary file and
  moved into place with ``os.replace`` (a crash never leaves half a cache); loading reads
  tensors only (nothing is unpickled).

Shapes: ``P`` prefixes, ``S`` samples per prefix; samples are stored in the n-per-prefix layout
(prefix ``p``'s at rows ``p S .. p S + S - 1``). Memory: ``8 (P T_c + P S T_x + P + P S)`` bytes.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from ebms._checks import check_int
from ebms._progress import progress_bar
from ebms.capabilities import SupportsPrefixSampling
from ebms.errors import DataError
from ebms.sequences import Sequences

__all__ = ["NegativeCache"]

#: the header metadata key that marks a negative-cache file
META_KEY = "ebms.negative_cache"
FORMAT = 1
#: batches above which ``build`` shows a progress bar by default
PROGRESS_AFTER = 4


class NegativeCache:
    """``S`` stored base-LM continuations of each of ``P`` prefixes (see the module docstring).

    Args:
        prefixes: the ``P`` prefixes (token ids ``>= 1``).
        samples: ``P S`` continuations in the n-per-prefix layout.
        samples_per_prefix: ``S >= 1``.
        horizon: the horizon the samples were drawn under (``None``: to ``</s>``).
        settings: JSON-able sampling settings kept with the cache (``top_k``, ``temperature``...).

    Attributes:
        prefixes, samples, samples_per_prefix, horizon, settings; ``len(cache) = P``.
    """

    def __init__(self, prefixes: Sequences, samples: Sequences, samples_per_prefix: int, *,
                 horizon: int | None, settings: dict[str, Any] | None = None) -> None:
        for name, s in (("prefixes", prefixes), ("samples", samples)):
            Sequences.coerce(s, name=name, pairs=False, expected="an ebms.sequences.Sequences")
        self.samples_per_prefix = check_int(samples_per_prefix, "samples_per_prefix", minimum=1)
        if samples.batch_size != prefixes.batch_size * self.samples_per_prefix:
            raise ValueError(f"samples: expected {prefixes.batch_size} prefixes x {self.samples_per_prefix} = "
                             f"{prefixes.batch_size * self.samples_per_prefix} rows; got {samples.batch_size}")
        self.horizon = None if horizon is None else check_int(horizon, "horizon", minimum=1)
        if self.horizon is not None and samples.batch_size and int(samples.lengths.max()) > self.horizon:
            raise ValueError(f"samples: expected at most horizon={self.horizon} tokens; got one of "
                             f"{int(samples.lengths.max())}")
        self.prefixes, self.samples = prefixes.to("cpu").canonical(), samples.to("cpu").canonical()
        self.settings = dict(settings or {})

    def __len__(self) -> int:
        return self.prefixes.batch_size

    @classmethod
    def build(cls, lm: Any, prefixes: Sequences, samples_per_prefix: int, *, horizon: int | None,
              generator: torch.Generator | None, top_k: int | None = None, top_p: float | None = None,
              temperature: float = 1.0, batch_size: int = 1024, progress: bool | None = None) -> NegativeCache:
        """Draw ``samples_per_prefix`` continuations of every prefix from ``lm``.

        Args:
            lm: the base LM in eval mode (a :class:`~ebms.capabilities.SupportsPrefixSampling`: an
                :class:`~ebms.models.lm.AutoregressiveLM` or :class:`~ebms.models.NGramContinuations`;
                its ``sample`` is called with ``prefix=``, ``max_length=horizon``,
                ``truncate=horizon is not None``).
            prefixes: ``P`` prefixes.
            samples_per_prefix: ``S >= 1``.
            horizon: ``K >= 1`` or ``None`` (see the module docstring).
            generator: the only source of randomness (on the LM's device).
            top_k, top_p, temperature: restrict the base law as in ``lm.sample`` (stored in ``settings``).
            batch_size: draws per ``lm.sample`` call (at least ``S``: whole prefixes per call).
            progress: show a progress bar (default: when there are more than 4 calls).

        Cost: ``ceil(P S / batch_size)`` sampling calls of at most ``horizon`` steps each.

        Raises:
            TypeError: ``lm`` without ``sample``, ``prefixes`` not Sequences.
            ValueError: ``lm`` in training mode, ``S < 1``, ``batch_size < 1``.
        """
        if not isinstance(lm, SupportsPrefixSampling):
            raise TypeError(f"lm: expected a language model with sample(n, prefix=...); got {type(lm).__name__}")
        if isinstance(lm, nn.Module) and lm.training:
            raise ValueError("lm: is in training mode (dropout changes its law); call lm.eval() first")
        prefixes = Sequences.coerce(prefixes, name="prefixes", pairs=False, expected="an ebms.sequences.Sequences")
        S = check_int(samples_per_prefix, "samples_per_prefix", minimum=1)
        per_call = max(1, check_int(batch_size, "batch_size", minimum=1) // S)
        horizon = None if horizon is None else check_int(horizon, "horizon", minimum=1)
        P = prefixes.batch_size
        starts = range(0, P, per_call)
        show = len(starts) > PROGRESS_AFTER if progress is None else bool(progress)
        parts = []
        for start in progress_bar(starts, desc="negatives", unit="batch", enabled=show):
            chunk = prefixes[start:start + per_call]
            law: dict[str, Any] = dict(generator=generator, max_length=horizon, temperature=temperature,
                                       top_k=top_k, top_p=top_p, truncate=horizon is not None)
            with torch.no_grad():
                if lm.per_prefix_sampling:  # declared: each prefix encoded once for its S draws
                    per_prefix: Any = lm.sample  # the declared per_prefix= form
                    draws = per_prefix(chunk.batch_size * S, prefix=chunk, per_prefix=S, **law)
                else:
                    rep = Sequences(chunk.tokens.repeat_interleave(S, 0), chunk.lengths.repeat_interleave(S),
                                    validate=False)
                    draws = lm.sample(rep.batch_size, prefix=rep, **law)
            parts.append(draws.to("cpu"))
        empty = Sequences(torch.zeros(0, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
        samples = Sequences.cat(parts) if parts else empty
        settings = {"top_k": top_k, "top_p": top_p, "temperature": float(temperature)}
        return cls(prefixes, samples, S, horizon=horizon, settings=settings)

    def draw(self, index: Tensor, nu: int, generator: torch.Generator | None = None) -> Sequences:
        """``nu`` stored samples of each prefix ``index[b]``, uniform with replacement over its ``S``.

        Returns:
            Sequences of ``nu B`` rows on the CPU, row ``b``'s draws at ``b nu .. b nu + nu - 1``.

        Raises:
            TypeError: ``index`` not an integer tensor.
            ValueError: ``index`` not 1-D or out of ``[0, P)``, ``nu < 1``.
        """
        if not isinstance(index, Tensor) or index.dtype.is_floating_point or index.dtype == torch.bool:
            raise TypeError(f"index: expected a 1-D integer tensor of prefix indices; got {index!r}"[:200])
        if index.dim() != 1:
            raise ValueError(f"index: expected a 1-D tensor (B,); got shape {tuple(index.shape)}")
        nu = check_int(nu, "nu", minimum=1)
        index = index.to("cpu", torch.long)
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= len(self)):
            raise ValueError(f"index: expected prefix indices in [0, {len(self) - 1}]; got min {int(index.min())}, "
                             f"max {int(index.max())}")
        S = self.samples_per_prefix
        pick = torch.randint(S, (index.numel() * nu,), generator=generator, device="cpu")
        rows = index.repeat_interleave(nu) * S + pick
        return self.samples[rows].canonical()

    def save(self, path: str | Path) -> Path:
        """Write the cache to ``path`` (one ``.safetensors`` file, atomically); returns the path."""
        path = Path(path)
        tensors = {"prefix_tokens": self.prefixes.tokens, "prefix_lengths": self.prefixes.lengths,
                   "sample_tokens": self.samples.tokens, "sample_lengths": self.samples.lengths}
        tensors = {k: v.clone(memory_format=torch.contiguous_format) for k, v in tensors.items()}  # no shared storage
        meta = {"format": FORMAT, "samples_per_prefix": self.samples_per_prefix, "horizon": self.horizon,
                "settings": self.settings}
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            save_file(tensors, tmp, metadata={META_KEY: json.dumps(meta)})
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    @classmethod
    def load(cls, path: str | Path) -> NegativeCache:
        """Read a cache written by :meth:`save`.

        Raises:
            FileNotFoundError: no file at ``path``.
            ebms.errors.DataError: a file that is not a negative cache (not safetensors, no cache
                metadata, missing or inconsistent tensors).
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"path: no negative cache at {path}")
        try:
            tensors = load_file(str(path))
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(n))
        except (SafetensorError, ValueError, OSError) as e:
            raise DataError(f"path: {path} is not a negative cache (not a readable .safetensors file: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        raw = header.get("__metadata__", {}).get(META_KEY) if isinstance(header, dict) else None
        names = {"prefix_tokens", "prefix_lengths", "sample_tokens", "sample_lengths"}
        if raw is None or set(tensors) != names:
            raise DataError(f"path: {path} is not a negative cache (no {META_KEY!r} metadata or tensors "
                            f"{sorted(tensors)} instead of {sorted(names)})")
        try:
            meta = json.loads(raw)
            return cls(Sequences(tensors["prefix_tokens"], tensors["prefix_lengths"]),
                       Sequences(tensors["sample_tokens"], tensors["sample_lengths"]),
                       meta["samples_per_prefix"], horizon=meta["horizon"], settings=meta.get("settings"))
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"path: {path} is not a valid negative cache ({str(e).splitlines()[0]})") from None

    def __repr__(self) -> str:
        return (f"NegativeCache(prefixes={len(self)}, samples_per_prefix={self.samples_per_prefix}, "
                f"horizon={self.horizon})")
