"""A tiny discrete-feature TRF run folder for the benchmark scripts' tests (``ebms train``, two steps)."""

from __future__ import annotations

from pathlib import Path


def tiny_trf_run(tmp: Path, train_sentences: list[str], test_sentences: list[str], *, name: str = "tiny",
                 overrides: tuple[str, ...] = ()) -> Path:
    """``ebms train`` of a TRF with 3 classes and 4 chains for two steps on the given text; the run folder
    (``tmp/name``; ``overrides``: more ``key=value`` settings, applied last)."""
    from ebms.cli.build import validate_config
    from ebms.cli.config import load_config
    from ebms.cli.run import train

    (tmp / "train.txt").write_text("\n".join(train_sentences) + "\n")
    (tmp / "test.txt").write_text("\n".join(test_sentences) + "\n")
    cfg = validate_config(load_config(None, [
        "data.name=text", f"language.train_path={tmp}/train.txt", f"language.test_path={tmp}/test.txt",
        "model.kind=trf", "trf.classes=3", "trf.chains=4", "train.steps=2", "train.batch_size=4",
        "train.checkpoint_every=1", "train.log_every=1", f"run.out_dir={tmp}", f"run.name={name}", "run.progress=false", *overrides]),
        device=False)
    return train(cfg)
