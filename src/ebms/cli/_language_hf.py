"""Private: ``model.kind = "huggingface"``, a pretrained causal LM of ``transformers`` on the language tasks.

``huggingface.path`` names a local folder a ``transformers`` causal LM was saved to (``save_pretrained``:
``config.json``, the weights, and its fast tokenizer's ``tokenizer.json``). ``ebms train`` trains nothing:
it wraps the model in :class:`~ebms.models.lm.HuggingFaceLM` and keeps it in the run like a fitted ``kn``
(the weights as the step-0 checkpoint; the run files ``tokenizer.json`` and :data:`HF_FILE`, the model's
config and boundary ids), so ``eval``, ``sample``, ``ebms score`` and ``ebms rescore`` read the run alone,
the folder no longer needed. Text is read as words (``language.level = "word"``, ``lower``,
``sentence_split`` as for any kind) and each sentence, its words joined by one space, is split by the model's
own tokenizer (:class:`~ebms.data.subword.SubwordVocabulary.fixed`: our id 0 is the model's end-of-text
token). ``eval`` reports the exact perplexity per token of the model's tokenizer and per word
(:mod:`ebms.cli._language_eval`), so it compares with word-level runs on the same text.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from ebms.cli._language_data import HELD_OUT, TOKENIZER_FILE, LanguageData, read_split
from ebms.cli.config import Config, ConfigError
from ebms.cli.language import PATH, LanguageSettings, LanguageTask
from ebms.cli.tasks import Section, register
from ebms.data.subword import SubwordTokenizer, SubwordVocabulary
from ebms.errors import CheckpointError
from ebms.sequences import Sequences
from ebms.train.run_files import dump_json, stored_json

__all__ = ["HF", "HF_FILE", "HuggingFaceSettings", "HuggingFaceTask"]

#: the run file of the model's config and boundary ids, and its format.
HF_FILE, HF_FORMAT = "huggingface.json", "ebms-huggingface-lm"
INSTALL = "model.kind: 'huggingface' needs the transformers package: pip install 'ebms[text]'"


@dataclass
class HuggingFaceSettings:
    """``[huggingface]``: the folder of a pretrained causal LM (``model.kind = "huggingface"``)."""

    path: str | None = None


HF = Section(HuggingFaceSettings, {"path": PATH})


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


class HuggingFaceTask(LanguageTask):
    """``huggingface``: a pretrained ``transformers`` causal LM, evaluated and applied (module docstring)."""

    model_kinds = ("huggingface",)
    more_sections: ClassVar[dict[str, Section]] = {"huggingface": HF}
    keys = ("huggingface.path",)
    bounded_length = False
    positions = True
    no_ais = "is normalised and its perplexity exact"

    @staticmethod
    def hf(cfg: Config) -> HuggingFaceSettings:
        s = cfg.sections["huggingface"]
        assert isinstance(s, HuggingFaceSettings)
        return s

    def fitted(self, cfg: Config) -> bool:
        return True

    def check_kind(self, cfg: Config) -> None:
        super().check_kind(cfg)
        lang, default = self.settings(cfg), LanguageSettings()
        if lang.level != "word":
            raise ConfigError(f"language.level: model.kind='huggingface' splits text with the model's own tokenizer "
                              f"(words joined by spaces); expected 'word' (the default); got {lang.level!r}")
        for key in ("min_count", "max_vocab", "max_length", "limit"):
            if getattr(lang, key) != getattr(default, key):
                raise ConfigError(f"language.{key}: model.kind='huggingface' uses the model's own vocabulary and "
                                  f"positions and trains on nothing; drop language.{key}")
        if importlib.util.find_spec("transformers") is None:
            raise ConfigError(f"{INSTALL}; or use model.kind='lstm' or 'transformer'")
        if self.hf(cfg).path is None:
            raise ConfigError("huggingface.path: expected the folder of a pretrained causal LM (config.json, weights "
                              "and tokenizer.json, as save_pretrained writes them); got none: set "
                              "huggingface.path=FOLDER")

    def check_inputs(self, cfg: Config) -> None:
        path = Path(str(self.hf(cfg).path)).expanduser()
        if not (path / "config.json").is_file():
            what = "not found" if not path.exists() else "a folder without config.json" if path.is_dir() else \
                "a file, not a folder"
            raise ConfigError(f"huggingface.path: {str(path)!r}: {what}; expected the folder of a pretrained causal "
                              f"LM (config.json, weights, tokenizer.json), e.g. written by model.save_pretrained")

    # -- the model and its tokenizer ------------------------------------------------------------
    def _pretrained(self, cfg: Config) -> tuple[Any, SubwordTokenizer]:
        """The wrapped model and tokenizer of ``huggingface.path`` (a training run: the folder is read)."""
        from ebms._hf import transformers_module
        from ebms.models.lm import HuggingFaceLM

        self.check_inputs(cfg)
        path = str(Path(str(self.hf(cfg).path)).expanduser())
        try:
            t = transformers_module(INSTALL)
            causal = set(t.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
            verbosity = t.logging.get_verbosity()
            t.logging.set_verbosity_error()  # its warnings and progress bars would add lines to a one-line error
            t.utils.logging.disable_progress_bar()
            try:
                config = t.AutoConfig.from_pretrained(path, local_files_only=True)
                named = list(getattr(config, "architectures", None) or [])
                if named and not causal.intersection(named):
                    raise ValueError(f"its architecture {', '.join(named)} is not a causal LM")
                lm = HuggingFaceLM.from_pretrained(path, local_files_only=True)
            finally:
                t.logging.set_verbosity(verbosity)
                t.utils.logging.enable_progress_bar()
        except ImportError:
            raise ConfigError(INSTALL) from None
        except (ValueError, OSError, KeyError, TypeError, RuntimeError) as e:
            raise ConfigError(f"huggingface.path: {path!r} holds no causal LM transformers can load "
                              f"({_first_line(e)}); expected a decoder-only model such as GPT-2 or Llama") from None
        tok_file = Path(path) / TOKENIZER_FILE
        try:
            if tok_file.is_file():
                tok = SubwordTokenizer.from_file(tok_file)
            else:
                fast = transformers_module(INSTALL).AutoTokenizer.from_pretrained(path, local_files_only=True)
                if not getattr(fast, "is_fast", False):
                    raise ValueError("its tokenizer is not a fast (tokenizers) one")
                tok = SubwordTokenizer(fast.backend_tokenizer, scheme="text")
        except (ValueError, OSError, KeyError, TypeError) as e:
            raise ConfigError(f"huggingface.path: {path!r}: no tokenizer this run can keep ({_first_line(e)}); "
                              f"expected a tokenizer.json (a transformers fast tokenizer's) in the folder") from None
        return lm, tok

    def _stored(self, stored: Mapping[str, bytes]) -> tuple[dict[str, Any], SubwordTokenizer]:
        spec = stored_json(stored, HF_FILE, HF_FORMAT)
        if TOKENIZER_FILE not in stored:
            raise CheckpointError(f"{TOKENIZER_FILE}: missing from the run's files; train the run again (--overwrite)")
        try:
            return spec, SubwordTokenizer.from_bytes(stored[TOKENIZER_FILE], scheme="text")
        except ValueError as e:
            raise CheckpointError(f"{TOKENIZER_FILE}: {e}; train the run again (--overwrite)") from None

    def _data(self, cfg: Config, stored: Mapping[str, bytes] | None, *, held: bool) -> LanguageData:
        if stored:
            spec, tok = self._stored(stored)
            lm = None
        else:
            lm, tok = self._pretrained(cfg)
            spec = {"format": HF_FORMAT, "version": 1, "config": json.loads(lm.model.config.to_json_string()),
                    "vocab_size": lm.vocab_size, "boundary_id": lm.boundary_id, "bos_id": lm.bos_id,
                    "max_length": lm.max_length}
        try:
            vocab = SubwordVocabulary.fixed(tok, int(spec["vocab_size"]), int(spec["boundary_id"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"huggingface.path: the tokenizer does not fit the model ({_first_line(e)})") from None
        out, words = {}, {}
        for split in HELD_OUT if held else ():
            sents = read_split(cfg, split)
            if sents:
                sents = sents[: cfg.data.n_test]
                out[split], words[split] = vocab.encode(vocab.split(sents)), sum(len(x) for x in sents)
        L = spec["max_length"] if spec["max_length"] is not None else 2**62
        data = LanguageData(vocab, Sequences.from_lists([]), out, int(L), name=cfg.data.name, words=words)
        data.cache["huggingface"] = spec
        if lm is not None:
            data.cache["huggingface_lm"] = lm
        return data

    def read(self, cfg: Config, stored: Mapping[str, bytes] | None) -> LanguageData:
        """The held-out sentences split by the model's tokenizer (the folder's, or the run's stored one)."""
        return self._data(cfg, stored, held=True)

    def load_applied(self, cfg: Config, stored: dict[str, bytes]) -> LanguageData:
        """The stored tokenizer and config, no sentence."""
        return self._data(cfg, stored, held=False)

    def run_files(self, cfg: Config, data: LanguageData) -> dict[str, bytes]:
        """``tokenizer.json`` and :data:`HF_FILE` (the model's config, vocabulary size, boundary ids, positions)."""
        assert isinstance(data.vocab, SubwordVocabulary)
        return {TOKENIZER_FILE: data.vocab.tokenizer.to_bytes(), HF_FILE: dump_json(data.cache["huggingface"])}

    def build_model(self, cfg: Config, data: LanguageData) -> nn.Module:
        """The folder's model (training), or one of the stored config whose weights the checkpoint gives."""
        from ebms._hf import transformers_module
        from ebms.models.lm import HuggingFaceLM

        if "huggingface_lm" in data.cache:
            return data.cache["huggingface_lm"]  # type: ignore[no-any-return]
        spec = data.cache["huggingface"]
        t = transformers_module(INSTALL)
        try:
            config = dict(spec["config"])
            hf_config = t.AutoConfig.for_model(config.pop("model_type"), **config)
            model = t.AutoModelForCausalLM.from_config(hf_config)
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"{HF_FILE}: not a causal LM config transformers builds ({_first_line(e)}); train "
                                  f"the run again (--overwrite)") from None
        return HuggingFaceLM(model.eval(), boundary_id=spec["boundary_id"], bos_id=spec["bos_id"],
                             max_length=spec["max_length"])

    def build_objective(self, cfg: Config, data: LanguageData) -> nn.Module:
        from ebms.objectives import AutoregressiveNLL

        return AutoregressiveNLL()

    def write_model_files(self, run_dir: Path, cfg: Config, model: nn.Module, data: LanguageData) -> list[Path]:
        """None: the model's own files are its folder's."""
        return []


register(HuggingFaceTask())
