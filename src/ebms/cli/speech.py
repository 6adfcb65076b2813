"""``ebms train`` on connected spoken digits with CTC or CTC-CRF (``data.name = "fsdd-digits"``).

The task (:func:`ebms.data.fsdd.connected_digits`): strings of 1..``speech.max_digits`` digits
concatenated from one FSDD speaker's takes, 40 log-mels + global CMVN, speaker-disjoint test set
(``speech.test_speakers``). The section ``[speech]`` holds the keys only this task reads:

* ``speech.n_train`` (default 1000) training utterances; ``data.n_test`` (default 300 here) test
  utterances; ``speech.max_digits`` (7), ``speech.test_speakers`` (``["theo"]``); ``data.root``.
* ``model.kind = "conv-bilstm"`` (:class:`ebms.nets.acoustic.ConvBiLSTM`, the default here):
  ``speech.channels`` conv channels (16), ``speech.hidden`` LSTM units per direction (64),
  ``speech.layers``, ``speech.dropout``.
* ``objective.kind``: ``"ctc"`` (the default; Graves et al., 2006) or ``"ctc-crf"`` (Xiang & Ou,
  2019) with the denominator label n-gram of order ``speech.lm_order`` fitted on the training
  transcripts and the auxiliary CTC weight ``speech.ctc_weight``
  (:class:`ebms.objectives.CTCObjective`).

``evaluate`` (:func:`ebms.metrics.ctc_eval.evaluate_ctc`) reports the test label error rate (percent)
of greedy (best-path) decoding with its substitutions / deletions / insertions and the sentence
error rate; for ``ctc-crf`` also ``ler_lm``: decoding with the denominator n-gram.

A run keeps ``data.json``: the sha256 of its training utterances' transcripts and frame counts, the sample rate,
the global CMVN statistics fitted on them and (``ctc-crf``) the transcripts. ``eval`` and a resume refuse recordings
that no longer give those utterances (the denominator n-gram is fitted to their transcripts), naming ``data.root``,
and normalise with the stored statistics (a run trained before they were stored refits them, as it did). ``ebms
decode`` (:class:`ebms.apply.speech.SpeechDecoder`) reads no recording: the stored statistics, and the graph rebuilt
from the stored transcripts (older runs: from the data); it refuses a run without the statistics. ``speech.ctc_weight``
and ``speech.lm_order`` belong to ``ctc-crf``: set with ``ctc``, they are refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from torch import nn

from ebms.cli._config_rules import COUNT, DROPOUT, NONNEG, Rule
from ebms.cli._unread_keys import refuse_unread
from ebms.cli.config import Config, ConfigError, ModelConfig
from ebms.cli.tasks import StructuredTask, TaskData, register
from ebms.errors import CheckpointError
from ebms.objectives import CTCObjective
from ebms.train.run_files import changed_data, dump_json, fingerprint, stored_json

__all__ = ["SpeechSettings", "SpeechTask"]

DATA_SEED = 0
EVAL_BATCH = 64
#: the run file of the training data's fingerprint (module docstring).
DATA_FILE, DATA_FORMAT = "data.json", "ebms-speech-data"
#: ``[speech]`` keys only ``objective.kind = "ctc-crf"`` reads.
CRF_KEYS = ("ctc_weight", "lm_order")
#: each ``objective.kind`` and whether it trains against a denominator graph (``ctc-crf``: the keys above).
DEN_GRAPH = {"ctc": False, "ctc-crf": True}


@dataclass
class SpeechSettings:
    """``[speech]``: the connected-digit task's own keys."""

    n_train: int = 1000
    max_digits: int = 7
    test_speakers: list[str] = field(default_factory=lambda: ["theo"])
    channels: int = 16
    hidden: int = 64
    layers: int = 1
    dropout: float = 0.0
    ctc_weight: float = 0.0
    lm_order: int = 2


class SpeechTask(StructuredTask[SpeechSettings]):
    """Connected-digit recognition trained with CTC or CTC-CRF (module docstring)."""

    data_names = ("fsdd-digits",)
    model_kinds = ("conv-bilstm",)
    objective_kinds = tuple(DEN_GRAPH)
    section = "speech"
    settings_type = SpeechSettings
    rules: ClassVar[dict[str, Rule]] = {
        "n_train": COUNT, "max_digits": COUNT,
        "test_speakers": Rule(min_items=1, text="a non-empty list of speaker names",
                              check=lambda v: all(x.strip() != "" for x in v)),
        "channels": COUNT, "hidden": COUNT, "layers": COUNT, "dropout": DROPOUT, "ctc_weight": NONNEG,
        "lm_order": COUNT,
    }
    moved: ClassVar[dict[str, str]] = {
        "data.n_train": "n_train", "data.max_digits": "max_digits", "data.test_speakers": "test_speakers",
        "model.layers": "layers", "model.dropout": "dropout", "objective.ctc_weight": "ctc_weight",
        "objective.lm_order": "lm_order",
    }
    #: the recipes' test set when ``data.name = "fsdd-digits"`` is given alone.
    defaults: ClassVar[dict[str, Any]] = {"data.n_test": 300}
    applies: ClassVar[tuple[str, ...]] = ("decode",)

    def check(self, cfg: Config) -> None:
        if cfg.model.hidden != ModelConfig().hidden:
            raise ConfigError(f"model.hidden: the MLP's hidden widths; the acoustic model's sizes are speech.channels "
                              f"and speech.hidden (renamed); got model.hidden={cfg.model.hidden}")
        s = self.settings(cfg)
        read = {f.name for f in dataclasses.fields(s) if DEN_GRAPH[cfg.objective.kind] or f.name not in CRF_KEYS}
        refuse_unread("speech", s, read, f"objective.kind={cfg.objective.kind!r}",
                      lambda key: ["objective.kind = 'ctc-crf'"] if key in CRF_KEYS else [])

    def load(self, cfg: Config, *, stored: Mapping[str, bytes] | None = None) -> TaskData:
        """The utterances; with ``stored`` (a trained run's files) the training ones must be the recorded ones."""
        from ebms.apply.speech import den_graph, stored_cmvn
        from ebms.data.fsdd import SAMPLE_RATE, connected_digits

        self.check(cfg)
        s = self.settings(cfg)
        record = stored_json(stored, DATA_FILE, DATA_FORMAT) if stored else {}
        stats = stored_cmvn(record, DATA_FILE) if "cmvn" in record else None
        try:
            task = connected_digits(n_train=s.n_train, n_test=cfg.data.n_test, max_digits=s.max_digits, seed=DATA_SEED,
                                    test_speakers=tuple(s.test_speakers), root=cfg.data.root, stats=stats)
        except FileNotFoundError as e:
            raise ConfigError(f"data.root: {e}") from None
        except ValueError as e:
            raise ConfigError(f"speech.test_speakers: {e}" if str(e).startswith("test_speakers") else f"data: {e}") from None
        tr = task.train
        try:
            graph = den_graph(tr.transcripts(), task.n_classes, s.lm_order) if DEN_GRAPH[cfg.objective.kind] else None
        except ValueError as e:
            raise ConfigError(f"speech.lm_order: {e}") from None
        info = {"n_features": int(tr.features.shape[2]), "n_classes": task.n_classes, "den_graph": graph,
                "test_speakers": list(task.test_speakers), "sample_rate": SAMPLE_RATE,
                "cmvn": task.stats if stats is not None or not stored else None,  # None: an older run's file
                "transcripts": None if graph is None or stored and "transcripts" not in record else tr.transcripts(),
                "train_sha256": fingerprint(tr.lengths, tr.targets, tr.target_lengths)}
        if stored and record.get("train_sha256") != info["train_sha256"]:
            raise changed_data("data.root", "the fsdd-digits training utterances (transcripts and frame counts)",
                               DATA_FILE)
        return TaskData((tr.features, tr.lengths, tr.targets, tr.target_lengths), task.test, info, name="fsdd-digits")

    def run_files(self, cfg: Config, data: TaskData) -> dict[str, bytes]:
        """``data.json``: the training utterances' fingerprint (transcripts, frame counts), the sample rate, the CMVN
        statistics fitted on them and a CTC-CRF's transcripts (a run trained before they were kept keeps its file)."""
        from ebms.apply.speech import cmvn_record

        i = data.info
        kept = {} if i["cmvn"] is None else cmvn_record(i["cmvn"], i["sample_rate"], i.get("transcripts"))
        return {DATA_FILE: dump_json({"format": DATA_FORMAT, "version": 1, "n_classes": i["n_classes"],
                                      "train_sha256": i["train_sha256"], **kept})}

    def load_applied(self, cfg: Config, stored: dict[str, bytes]) -> TaskData | None:
        """``decode``'s sizes, statistics and graph from ``data.json`` alone (:func:`ebms.apply.speech.applied_info`)."""
        from ebms.apply.speech import applied_info

        order = self.settings(cfg).lm_order if DEN_GRAPH[cfg.objective.kind] else None
        info = applied_info(stored_json(stored, DATA_FILE, DATA_FORMAT), DATA_FILE, lm_order=order)
        return None if info is None else TaskData((), None, info, name="fsdd-digits")

    def build_model(self, cfg: Config, data: TaskData) -> nn.Module:
        from ebms.nets.acoustic import ConvBiLSTM

        s = self.settings(cfg)
        return ConvBiLSTM(data.info["n_features"], data.info["n_classes"], channels=s.channels, hidden=s.hidden,
                          layers=s.layers, dropout=s.dropout)

    def build_objective(self, cfg: Config, data: TaskData) -> nn.Module:
        graph = data.info.get("den_graph")
        return CTCObjective(graph, ctc_weight=self.settings(cfg).ctc_weight if graph is not None else 0.0)

    def evaluate(self, cfg: Config, model: nn.Module, data: TaskData) -> dict[str, float]:
        from ebms.metrics.ctc_eval import evaluate_ctc

        return evaluate_ctc(model, data.test.features, data.test.lengths, data.test.transcripts(),
                            den_graph=data.info.get("den_graph"), batch_size=EVAL_BATCH)

    def applier(self, command: str, cfg: Config, model: nn.Module, data: TaskData) -> Any:
        """``decode``: :class:`ebms.apply.speech.SpeechDecoder` with the run's stored CMVN statistics."""
        from ebms.apply.speech import SpeechDecoder

        if data.info["cmvn"] is None:
            raise CheckpointError(f"decode: this run's {DATA_FILE} keeps no CMVN statistics (trained by an older ebms, "
                                  f"which fitted them again at every load); train the run again (--overwrite)")
        return SpeechDecoder(model, data.info["cmvn"], sample_rate=data.info["sample_rate"],
                             den_graph=data.info["den_graph"], batch_size=EVAL_BATCH, progress=cfg.run.progress)


register(SpeechTask())
