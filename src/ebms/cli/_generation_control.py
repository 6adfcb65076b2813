"""Private: controlled generation on addition strings (``model.kind = "controlled"``, issue 28; monograph §4.4.2).

The run trains the masked LM of mix-and-match, a :class:`~ebms.nets.TwoTowerCloze` with LSTM towers
of width ``generation.dim`` (``layers``, ``dropout``), by maximum pseudo-likelihood
(``objective.kind = "ml"``: :class:`~ebms.objectives.ClozePLL`) on the training sentences of the base
run ``generation.base_run`` (an addition ``transformer`` or ``lstm`` run on the same sentences, with
the same share ``generation.error_rate`` of corrupted sums). The base LM is frozen; like a residual
run, the run records the base's checkpoint in ``base.json`` and refuses a base trained again since.

``eval``: ``data.n_test`` sentences generated without a prompt, row ``b`` asked for a written sum that
ends in the digit ``b mod 10`` (the constraint; success is exact), by three methods from the same
base draws (seed ``run.seed``):

* ``plain``: one base-LM draw per row (the constraint ignored);
* ``mm`` (mix-and-match, :class:`~ebms.samplers.MixAndMatch`): from the base draw,
  ``generation.mm_epochs`` systematic scans of the energy ``E_mlm + mm_alpha * [not met]``
  (:class:`~ebms.models.controlled.ClozeFluency`, :class:`~ebms.models.controlled.TokenConstraint`)
  with the cloze model as proposal;
* ``cold`` (:func:`~ebms.samplers.cold_decode`): ``generation.cold_steps`` Langevin steps of size
  ``cold_step_size`` (COLD's annealed noise) on ``-f_LM + cold_lambda * soft constraint`` from the base
  LM's logits along the draw, then top-``cold_top_k`` guided discretisation by the base LM.

Figures per method: ``met`` (well formed, last sum digit as asked), ``met_right`` (also the right
sum), ``right`` and ``ppl`` (the outputs' perplexity under the base LM, ``</s>`` included).
``sample``: mix-and-match outputs, each with the digit asked and ``met`` or ``missed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli.config import Config
from ebms.cli.generation import (
    EVAL_SEED_OFFSET,
    AdditionData,
    GenerationReport,
    GenerationTask,
    ResidualAdditionTask,
)
from ebms.cli.tasks import register
from ebms.data.addition import AdditionTask
from ebms.models.controlled import (
    ClozeFluency,
    SoftFluency,
    TokenConstraint,
    allowed_tokens,
    cloze_proposal,
    lm_logits_along,
    lm_next_logits,
)
from ebms.nets.two_tower import TwoTowerCloze
from ebms.objectives.cloze import ClozePLL
from ebms.samplers.cold import cold_decode, noise_schedule
from ebms.samplers.mix_and_match import MixAndMatch, ProductOfExperts
from ebms.sequences import Sequences

__all__ = ["CONTROL_KEYS", "ControlReport", "ControlledAdditionTask", "constraint_shares"]

#: the ``[generation]`` keys only this kind reads (its evaluation's settings).
CONTROL_KEYS = ("mm_alpha", "mm_epochs", "cold_lambda", "cold_steps", "cold_step_size", "cold_top_k")
METHODS = ("plain", "mm", "cold")
_ZERO, _PLUS, _EQUALS = 2, 12, 13


def constraint_shares(task: AdditionTask, x: Sequences, targets: Tensor) -> tuple[Tensor, Tensor]:
    """``(met, right)``, bool ``(B,)``: ``x`` is a well-formed sentence whose last sum digit is the id
    ``targets[b]``; ``x`` is a right sum (:meth:`AdditionTask.is_correct`)."""
    d, L = task.digits, task.length
    tok = torch.nn.functional.pad(x.tokens, (0, max(0, L - x.tokens.shape[1])))[:, :L]
    layout = (tok >= _ZERO) & (tok < _ZERO + 10)
    layout[:, d], layout[:, 2 * d + 1] = tok[:, d] == _PLUS, tok[:, 2 * d + 1] == _EQUALS
    met = layout.all(1) & (x.lengths == L) & (tok[:, -1] == targets)
    return met, task.is_correct(x)


@dataclass(frozen=True)
class ControlReport(GenerationReport):
    """``eval`` of a controlled run: per method (``plain``, ``mm``, ``cold``) the shares and perplexity."""

    rows: int = 0

    def lines(self) -> list[str]:
        f = self.figures
        out = [f"{self.task}: {self.rows} unprompted sentences, each asked for a sum ending in a given digit (step "
               f"{self.step})"]
        names = {"plain": "plain LM sampling", "mm": "mix-and-match", "cold": "COLD"}
        for m in METHODS:
            out.append(f"{self.task}: {names[m]}: constraint met {f[m + '_met']:.3f}, met with the right sum "
                       f"{f[m + '_met_right']:.3f}, right sums {f[m + '_right']:.3f}, perplexity under the base LM "
                       f"{f[m + '_ppl']:.4f}")
        return out


class ControlledAdditionTask(ResidualAdditionTask):
    """``controlled``: the cloze model of mix-and-match on the base of ``generation.base_run`` (module docstring)."""

    model_kinds = ("controlled",)
    trained_by = ("ml",)
    trained_by_text = "'ml' (maximum pseudo-likelihood of the cloze model)"
    keys: ClassVar[tuple[str, ...]] = ("digits", "n_train", "error_rate", "base_run", "dim", "layers", "dropout",
                                       *CONTROL_KEYS)
    objective_keys: ClassVar[dict[str, tuple[str, ...]]] = {}
    applies: ClassVar[tuple[str, ...]] = ()

    def reads(self, cfg: Config) -> set[str]:
        return GenerationTask.reads(self, cfg)

    def build_model(self, cfg: Config, data: AdditionData) -> nn.Module:
        s = self.settings(cfg)
        return TwoTowerCloze(data.task.vocab_size, dim=s.dim, layers=s.layers, dropout=s.dropout, kind="lstm")

    def build_objective(self, cfg: Config, data: AdditionData) -> nn.Module:
        return ClozePLL()

    def training_data(self, cfg: Config, data: AdditionData) -> Any:
        """The training sentences, a share ``generation.error_rate`` of their sums corrupted (as the base's)."""
        return GenerationTask.training_data(self, cfg, data)

    def _generate(self, cfg: Config, cloze: nn.Module, data: AdditionData, n: int, seed: int
                  ) -> tuple[dict[str, Sequences], Tensor]:
        """The ``n`` outputs of every method and the target digit ids ``(n,)``."""
        s, task, lm = self.settings(cfg), data.task, data.cache["base"]
        assert isinstance(cloze, TwoTowerCloze)
        g = torch.Generator().manual_seed(seed)
        L = task.length
        targets = torch.arange(n) % 10 + _ZERO
        constraint = TokenConstraint.targets(L - 1, targets, task.vocab_size)
        cloze.eval()
        lm.eval()
        with torch.no_grad():
            draw = lm.sample(n, g, max_length=L, truncate=True).pad_to(L)
        draw = Sequences(draw.tokens.masked_fill(~draw.mask(), _ZERO), torch.full((n,), L))
        energy = ProductOfExperts([ClozeFluency(cloze), constraint], [1.0, s.mm_alpha])
        mm = MixAndMatch(cloze_proposal(cloze)).sample(energy, draw, s.mm_epochs * L, generator=g,
                                                       progress=cfg.run.progress)
        fluency = SoftFluency(lm)
        res = cold_decode(lambda y: fluency(y) + s.cold_lambda * constraint.soft(y), lm_logits_along(lm, draw),
                          step_size=s.cold_step_size, noise=noise_schedule(s.cold_steps), next_logits=lm_next_logits(lm),
                          top_k=s.cold_top_k, allowed=allowed_tokens(task.vocab_size, [0, 1]), generator=g)
        return {"plain": draw, "mm": mm, "cold": Sequences(res.tokens, torch.full((n,), L))}, targets

    def report(self, cfg: Config, model: nn.Module, data: AdditionData, step: int, *,
               use_ais: bool = False) -> ControlReport:
        n = cfg.data.n_test
        outs, targets = self._generate(cfg, model, data, n, cfg.run.seed + EVAL_SEED_OFFSET)
        lm, figures = data.cache["base"], dict[str, float]()
        for m, x in outs.items():
            met, right = constraint_shares(data.task, x, targets)
            with torch.no_grad():
                lp = float(lm.log_prob(x).double().sum())
            figures |= {f"{m}_met": float(met.double().mean()), f"{m}_met_right": float((met & right).double().mean()),
                        f"{m}_right": float(right.double().mean()), f"{m}_ppl": math.exp(-lp / float((x.lengths + 1).sum()))}
        return ControlReport(step, f"addition ({data.task.digits}-digit), controlled", figures, rows=n)

    def sample(self, cfg: Config, model: nn.Module, data: AdditionData, *, n: int | None = None,
               steps: int | None = None, seed: int | None = None) -> Tensor:
        """``n`` mix-and-match outputs; the digit asked of row ``b`` is ``b mod 10``."""
        n = cfg.eval.n_samples if n is None else n
        outs, _ = self._generate(cfg, model, data, n, cfg.run.seed if seed is None else seed)
        return outs["mm"].tokens

    def sample_text(self, x: Tensor, data: AdditionData) -> list[str]:
        """Each sentence, the digit asked, then ``met`` or ``missed``."""
        seqs = Sequences(x, (x > 0).sum(1))
        targets = torch.arange(x.shape[0]) % 10 + _ZERO
        met, _ = constraint_shares(data.task, seqs, targets)
        return [f"{text}  ends in {int(t) - _ZERO}? {'met' if ok else 'missed'}"
                for text, t, ok in zip(data.task.decode(seqs), targets.tolist(), met.tolist())]


register(ControlledAdditionTask())
