"""``ebms train`` on connected spoken digits with CTC or CTC-CRF (``data.name = "fsdd-digits"``).

The task (:func:`ebms.data.fsdd.connected_digits`): strings of 1..``data.max_digits`` digits
concatenated from one FSDD speaker's takes, 40 log-mels + global CMVN, speaker-disjoint test set
(``data.test_speakers``). Keys:

* ``data.n_train`` (default 1000) and ``data.n_test`` (default 300) training / test utterances,
  ``data.max_digits`` (7), ``data.test_speakers`` (``["theo"]``), ``data.root``.
* ``model.kind = "conv-bilstm"`` (:class:`ebms.nets.acoustic.ConvBiLSTM`, the default here):
  ``model.hidden = [H]`` (LSTM units per direction, 32 conv channels) or ``[C, H]`` (default
  ``[16, 64]``); ``model.layers``, ``model.dropout``.
* ``objective.kind``: ``"ctc"`` (the default; Graves et al., 2006) or ``"ctc-crf"`` (Xiang & Ou, 2019) with the
  denominator label n-gram of order ``objective.lm_order`` fitted on the training transcripts and
  the auxiliary CTC weight ``objective.ctc_weight``.

``evaluate`` reports the test label error rate (percent) of greedy (best-path) decoding with its
substitutions / deletions / insertions and the sentence error rate; for ``ctc-crf`` also
``ler_lm``: decoding with the denominator n-gram (:func:`ebms.structured.ctc_crf.ctc_crf_decode`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli.build import resolve
from ebms.cli.config import Config, ConfigError
from ebms.cli.tasks import StructuredTask, TaskData, register
from ebms.objectives._base import LossOutput, scalar_metrics

__all__ = ["MODEL_KINDS", "OBJECTIVE_KINDS", "SpeechTask"]

OBJECTIVE_KINDS = ("ctc", "ctc-crf")
MODEL_KINDS = ("conv-bilstm",)
DEFAULT_N_TRAIN = 1000
DATA_SEED = 0
EVAL_BATCH = 64


def _check_config(cfg: Config) -> None:
    where = "for data.name='fsdd-digits'"
    resolve(dict.fromkeys(OBJECTIVE_KINDS), cfg.objective.kind, "objective.kind", context=where)
    resolve(dict.fromkeys(MODEL_KINDS), cfg.model.kind, "model.kind", context=where)
    if len(cfg.model.hidden) not in (1, 2) or min(cfg.model.hidden) < 1:
        raise ConfigError(f"model.hidden: expected [H] or [channels, H] with positive sizes; got {cfg.model.hidden}")
    if cfg.objective.ctc_weight < 0:
        raise ConfigError(f"objective.ctc_weight: expected a number >= 0; got {cfg.objective.ctc_weight}")
    if cfg.objective.kind == "ctc-crf" and cfg.objective.lm_order < 1:
        raise ConfigError(f"objective.lm_order: expected an integer >= 1; got {cfg.objective.lm_order}")
    for key, value, low in (("data.n_train", cfg.data.n_train, 1), ("data.n_test", cfg.data.n_test, 1),
                            ("data.max_digits", cfg.data.max_digits, 1)):
        if value is not None and value < low:
            raise ConfigError(f"{key}: expected an integer >= {low}; got {value}")


def _den_graph(transcripts: list[list[int]], n_classes: int, order: int) -> Any:
    from ebms.structured.den_graph import DenominatorGraph
    from ebms.structured.ngram import LabelNGram

    return DenominatorGraph.from_ngram(LabelNGram.fit(transcripts, n_classes, order))


class _CTCObjective:
    """``objective(model, (features, lengths, targets, target_lengths), generator=)``: the CTC
    loss, or with a den graph the CTC-CRF loss ``log Z_den - (1 + ctc_weight) log p_CTC``; both
    are per-utterance losses divided by the target length, averaged over the batch."""

    def __init__(self, graph: Any = None, ctc_weight: float = 0.0) -> None:
        self.graph, self.ctc_weight = graph, ctc_weight

    def __call__(self, model: nn.Module, batch: tuple[Tensor, ...], generator: torch.Generator | None = None) -> LossOutput:
        features, lengths, targets, target_lengths = batch
        t_max, s_max = int(lengths.max()), int(target_lengths.max())
        log_probs, out_lengths = model(features[:, :t_max], lengths)
        targets = targets[:, :s_max]
        if self.graph is None:
            from ebms.structured.ctc import ctc_loss

            loss = ctc_loss(log_probs, targets, out_lengths, target_lengths)
            return LossOutput(loss, scalar_metrics(ctc=loss))
        from ebms.structured.ctc_crf import ctc_crf_loss

        loss = ctc_crf_loss(log_probs, targets, out_lengths, target_lengths, self.graph, ctc_weight=self.ctc_weight)
        return LossOutput(loss, scalar_metrics(ctc_crf=loss))


class SpeechTask(StructuredTask):
    """Connected-digit recognition trained with CTC or CTC-CRF (module docstring)."""

    data_names = ("fsdd-digits",)
    model_kinds = MODEL_KINDS
    objective_kinds = OBJECTIVE_KINDS
    #: the ctc-digits recipe's model size when ``data.name = "fsdd-digits"`` is given alone.
    defaults: ClassVar[dict[str, Any]] = {"model.hidden": [16, 64], "data.n_test": 300}

    def load(self, cfg: Config) -> TaskData:
        _check_config(cfg)
        from ebms.data.fsdd import connected_digits

        try:
            task = connected_digits(
                n_train=cfg.data.n_train or DEFAULT_N_TRAIN, n_test=cfg.data.n_test, max_digits=cfg.data.max_digits,
                seed=DATA_SEED, test_speakers=tuple(cfg.data.test_speakers), root=cfg.data.root,
            )
        except FileNotFoundError as e:
            raise ConfigError(f"data.root: {e}") from None
        except ValueError as e:
            raise ConfigError(f"data.test_speakers: {e}" if str(e).startswith("test_speakers") else f"data: {e}") from None
        tr = task.train
        graph = None
        if cfg.objective.kind == "ctc-crf":
            try:
                graph = _den_graph(tr.transcripts(), task.n_classes, cfg.objective.lm_order)
            except ValueError as e:
                raise ConfigError(f"objective.lm_order: {e}") from None
        info = {"n_features": int(tr.features.shape[2]), "n_classes": task.n_classes, "den_graph": graph,
                "test_speakers": list(task.test_speakers)}
        return TaskData((tr.features, tr.lengths, tr.targets, tr.target_lengths), task.test, info, name="fsdd-digits")

    def build_model(self, cfg: Config, data: TaskData) -> nn.Module:
        _check_config(cfg)
        from ebms.nets.acoustic import ConvBiLSTM

        h = cfg.model.hidden
        channels, hidden = (32, h[0]) if len(h) == 1 else (h[0], h[1])
        return ConvBiLSTM(data.info["n_features"], data.info["n_classes"], channels=channels, hidden=hidden,
                          layers=cfg.model.layers, dropout=cfg.model.dropout)

    def build_objective(self, cfg: Config, data: TaskData) -> Callable[..., Any]:
        return _CTCObjective(data.info.get("den_graph"), cfg.objective.ctc_weight)

    def evaluate(self, cfg: Config, model: nn.Module, data: TaskData) -> dict[str, float]:
        from ebms.metrics.error_rate import error_rate
        from ebms.structured.ctc import greedy_decode

        test = data.test
        graph = data.info.get("den_graph")
        refs = test.transcripts()
        greedy: list[list[int]] = []
        with_lm: list[list[int]] = []
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        with torch.no_grad():
            for i in range(0, len(test), EVAL_BATCH):
                lengths = test.lengths[i:i + EVAL_BATCH]
                x = test.features[i:i + EVAL_BATCH, :int(lengths.max())].to(device)
                log_probs, out_lengths = model(x, lengths.to(device))
                greedy += greedy_decode(log_probs, out_lengths).sequences()
                if graph is not None:
                    from ebms.structured.ctc_crf import ctc_crf_decode

                    with_lm += ctc_crf_decode(log_probs.cpu(), out_lengths.cpu(), graph).sequences()
        model.train(was_training)
        er = error_rate(refs, greedy)
        figures = {
            "ler": er.percent, "substitutions": er.substitutions, "deletions": er.deletions,
            "insertions": er.insertions, "ser": 100.0 * er.sentence_error_rate, "ref_labels": er.ref_length,
            "utterances": er.sentences,
        }
        if graph is not None:
            figures["ler_lm"] = error_rate(refs, with_lm).percent
        return figures


register(SpeechTask())
