"""Private: the trainer's run folder: fresh start, resume and overwrite; checkpoint save and restore.

A fresh ``fit()`` into a folder that holds checkpoints or a metrics log is refused
(:class:`~ebms.errors.RunFolderError`) unless it resumes or overwrites; a fresh start seeds
torch's global RNG from the run seed and rank. Checkpoints hold the complete state
(:mod:`ebms.train._snapshot`), the metrics-log offset (a resume cuts the log back to it) and the
last metrics.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ebms.errors import RunFolderError
from ebms.train import _snapshot
from ebms.train._data import mix_seed
from ebms.train._log import jsonable

if TYPE_CHECKING:
    from ebms.train.trainer import Trainer

logger = logging.getLogger("ebms.train")

#: salt of the global-RNG seed a fresh fit sets (kept apart from the trainer generator's seed)
_GLOBAL_RNG_SALT = 7


def open_run(t: Trainer, resume: bool | str | Path, overwrite: bool) -> int | None:
    """Resume or check the folder for a fresh start; the offset metrics.jsonl is cut to."""
    if t.store is None or t.run_dir is None:
        if resume is not False or overwrite:
            what = f"resume={resume!r}" if resume is not False else "overwrite=True"
            raise ValueError(f"{what}: an in-memory run (run_dir=None) keeps nothing to resume or overwrite; "
                             "give the Trainer a run_dir")
        return None
    if resume is True or (isinstance(resume, (str, Path)) and resume != "auto"):
        t.restore(None if resume is True else resume)
    elif resume == "auto" and t.store.has_checkpoint():
        t.restore()
    elif t._restored_from is None and t.step == 0:  # a fresh start (not after restore())
        # modules that draw from torch's global RNG (dropout) repeat too: seeded here, restored on resume
        torch.manual_seed(mix_seed(t.seed, t.dist.rank, _GLOBAL_RNG_SALT))
        log = t.run_dir / "metrics.jsonl"
        has_log = log.is_file() and log.stat().st_size > 0
        if t.store.has_any() or has_log:
            if not overwrite:
                what = ("checkpoints" if t.store.has_checkpoint() else "a metrics log but no checkpoint yet"
                        if has_log else "the weights of an unfinished first checkpoint")
                raise RunFolderError(
                    f"run_dir: {str(t.run_dir)!r} already holds a run ({what}); continue it with "
                    "resume=True (`ebms train --resume`), delete it with overwrite=True (`--overwrite`), "
                    "or use another run_dir (`run.name`)"
                )
            if t.is_main:
                t.store.clear()
            return 0
        return None
    if t._restored_from is not None:
        return t._resume_offset
    return None


def save_checkpoint(t: Trainer) -> Path | None:
    """:meth:`Trainer.save_checkpoint`."""
    if t.store is None:
        raise ValueError("save_checkpoint: an in-memory run (run_dir=None) writes no checkpoints; give the "
                         "Trainer a run_dir")
    tensors, meta = _snapshot.checkpoint_payload(t)
    meta["trainer"]["metrics_offset"] = t._log.offset()
    meta["metrics"] = jsonable(t.metrics)
    t._saved_step, t._saved_path = t.step, None
    path = t.store.save(t.step, tensors, meta, identity=t.identity) if t.is_main else None
    t._saved_path = path
    t.dist.barrier()  # no rank reads `latest` before rank 0 has committed
    if path is not None:
        logger.info("checkpoint %s", path)
    return path


def restore(t: Trainer, which: int | str | Path | None) -> Path:
    """:meth:`Trainer.restore`."""
    if t.store is None:
        raise ValueError("restore: an in-memory run (run_dir=None) has no checkpoints; give the Trainer a run_dir")
    ckpt = t.store.load(which, identity=t.identity)
    _snapshot.apply_checkpoint(t, ckpt)
    t._saved_step = t.step
    t._resume_offset = int(ckpt.meta["trainer"].get("metrics_offset", 0))
    t._restored_from = t._saved_path = ckpt.path
    t._stop_reason = ckpt.meta["trainer"].get("stop_reason")
    t.metrics = {}
    for k, v in (ckpt.meta.get("metrics") or {}).items():
        try:
            t.metrics[k] = float(v)  # "nan"/"inf" strings included
        except (TypeError, ValueError):
            continue
    return ckpt.path
