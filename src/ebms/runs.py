"""Load a run folder made by ``ebms train`` back into Python in one call.

::

    import ebms.runs

    run = ebms.runs.load_run("runs/demo")
    run.model                   # the trained energy (nn.Module, eval mode), newest valid checkpoint
    run.step, run.checkpoint    # the step it was saved at, and its JSON record
    x = run.sample(500)         # fresh chains of the configured sampler, (500, D)
    run.data.sample(500)        # the data set the run was trained on (toy / point cloud / images)
    run.config.train.lr         # the configuration (config.toml, with any overrides)

The folder's ``config.toml`` rebuilds the data set and the model; the weights
come from the newest checkpoint that verifies (a damaged one is skipped with a
warning), and that checkpoint must have been trained under the same settings
of role ``model`` (:data:`ebms.cli.run.KEY_ROLES`: the model, its data and objective, the task
section's keys that change the weights), else :class:`~ebms.errors.CheckpointError` names the keys
that differ. Evaluation settings (``eval.*``, ``vision.ood``, ...) and the sampler may be overridden.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["Run", "load_run"]


@dataclass(frozen=True)
class Run:
    """A trained run, as :func:`load_run` returns it.

    Attributes:
        path: the run folder.
        config: the :class:`ebms.cli.config.Config` the run was trained with
            (plus the overrides given to :func:`load_run`).
        model: the trained model in eval mode.
        data: the data set (a toy distribution, a point cloud with ``train``/``test``
            tensors, binary images, or a structured task's data).
        sampler: the configured sampler, with its exact Langevin noise for
            continuous data (``None`` for conditional tasks, which have no
            unconditional samples).
        step: the training step of the checkpoint.
        checkpoint: the checkpoint's JSON record.
    """

    path: Path
    config: Any
    model: nn.Module
    data: Any
    sampler: Any
    step: int
    checkpoint: Path

    def sample(self, n: int, *, steps: int | None = None, seed: int | None = None) -> torch.Tensor:
        """``n`` chains from a uniform start over the data's space after ``steps`` sampler steps.

        The same draw as ``ebms sample --n n --steps steps --seed seed``
        (defaults: ``eval.sample_steps`` and a seed derived from ``run.seed``).

        Raises:
            ValueError: the run is a conditional task (no unconditional samples).
        """
        from ebms.cli.run import serving_task

        return serving_task(self.config).sample(self.config, self.model, self.data, n=n, steps=steps, seed=seed)

    def applier(self, command: str) -> Any:
        """The object of :mod:`ebms.apply` that ``ebms <command>`` calls for this run (``"score"``, ``"tag"``,
        ``"decode"``, ``"classify"``).

        Raises:
            ebms.errors.ConfigError: the run's task does not serve ``command`` (the message names those it serves).
        """
        from ebms.cli.applied import applier_of

        return applier_of(self, command)

    def score(self, sentences: list[list[str]]) -> Any:
        """Each sentence's score under a language model run (``ebms score``): sentences as token lists (or lines of
        text, tokenised as the run's training text was); returns :class:`ebms.apply.text.SentenceScores`:
        ``log_prob (N,)`` float64 natural log with ``</s>`` (a TRF's with its training zeta, Electric's a
        pseudo-log-likelihood: ``measure`` says which), ``tokens (N,)``, ``oov (N,)``, ``perplexity()``.

        Raises:
            ebms.errors.ConfigError: not a language run, or a residual one (no sentence log-probability).
            ebms.errors.DataError: a sentence of a length the model does not score (a TRF's beyond ``L``).
        """
        return self.applier("score")(sentences)

    def tag(self, sentences: list[list[str]]) -> Any:
        """The IOB2 tags of each sentence by a tagging or JRF run (``ebms tag``): ``list[list[str]]``, one tag per
        token (``[]`` for an empty sentence), decoded as ``ebms eval`` decodes
        (:class:`ebms.apply.tagging.SentenceTagger`).

        A sentence is a list of tokens (``str``), or of column tuples ``(word, POS, ...)`` for a feature CRF, whose
        attributes read the POS tag too. Unknown words map as the test words did (the run's stored vocabulary).

        Raises:
            ebms.errors.DataError: a feature CRF given tokens without their POS tags.
        """
        return self.applier("tag")(sentences)

    def decode(self, waves: list[torch.Tensor], sample_rate: int) -> Any:
        """The transcripts of waveforms by a speech run (``ebms decode``): an :class:`ebms.apply.speech.Transcripts`
        (``labels``: one label list per wave, ``words``: each as space-separated digit words, ``decoder``).

        ``waves`` are 1-D float tensors ``(N_i,)`` in ``[-1, 1]`` at ``sample_rate`` Hz (resampled to the run's rate
        when it differs), featurised with the normaliser the run stored and decoded as ``ebms eval`` does (best path;
        a CTC-CRF run: its denominator n-gram); :meth:`applier` ``("decode")`` gives the decoder itself
        (:class:`ebms.apply.speech.SpeechDecoder`: other decoders, batch sizes, scoring against references)."""
        return self.applier("decode")(waves, sample_rate)

    def classify(self, images: torch.Tensor) -> Any:
        """Labels, probabilities and out-of-distribution scores of images by an image run (``ebms classify``).

        ``images``: ``(N, H, W)`` or ``(N, 1, H, W)`` of the run's size, ``uint8`` grey levels or floats in
        ``[0, 1]`` (white on black). Returns an :class:`ebms.apply.images.ImageClassification`: ``labels (N,)``,
        ``probs (N, K)`` at the temperature ``ebms eval`` fits on the run's validation images, ``scores (N,)``
        ``= -E(x)`` (``logsumexp`` of the logits; higher = more in-distribution); an image energy
        (``model.kind = "conv"``) gives ``scores`` alone. See :class:`ebms.apply.images.ImageClassifier`.

        Raises:
            ebms.errors.DataError: images of another size or shape, or values outside ``[0, 1]`` / ``0..255``.
        """
        return self.applier("classify")(images)


def load_run(path: str | Path, overrides: list[str] | tuple[str, ...] = (), *, training_data: bool = True) -> Run:
    """The trained model, data, sampler, config and step of a run folder made by ``ebms train``.

    Args:
        path: the run folder (``<run.out_dir>/<run.name>``).
        overrides: ``section.key=value`` strings applied to the folder's
            ``config.toml`` (e.g. ``["eval.sample_steps=100"]``); settings that
            change what was trained (role ``model`` in :data:`ebms.cli.run.KEY_ROLES`) are refused.
        training_data: ``False``: build the model from the run's stored files alone, without reading its
            training data, where its task can (``run.data`` is then only what :meth:`Run.score`, :meth:`Run.tag`,
            :meth:`Run.decode` and :meth:`Run.classify` need, and ``run.sampler`` is ``None``; the commands
            applying a run load it so).

    Raises:
        ebms.errors.RunFolderError: no ``config.toml`` or no checkpoint in ``path``.
        ebms.errors.CheckpointError: no checkpoint verifies, or it was trained
            under other settings.
        ebms.errors.ConfigError: ``config.toml`` or an override is invalid.
    """
    from ebms.cli.run import open_run, serving_task

    cfg, model, data, ckpt = open_run(path, tuple(overrides), training_data=training_data)
    sampler = serving_task(cfg).sampler(cfg, data) if training_data else None  # as `ebms sample`: exact SGLD noise
    return Run(path=Path(path), config=cfg, model=model, data=data, sampler=sampler, step=ckpt.step,
               checkpoint=ckpt.path)
