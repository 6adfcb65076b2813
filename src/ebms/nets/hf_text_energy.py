r"""A Hugging Face masked-LM encoder (BERT, RoBERTa, ...) as the sequence energy of a residual EBM.

The residual-EBM paper's strongest energies are bidirectional Transformers initialised from a
pretrained masked LM (Deng, Bakhtin, Ott, Szlam & Ranzato 2020, *Residual energy-based models for
text generation*, ICLR, §4: BIT-BASE from BERT-Base, BIT-LARGE from RoBERTa-Large).
:class:`HFTextEnergy` puts any ``transformers`` encoder (Wolf et al. 2020) under the contract of
:class:`~ebms.nets.text_energy.TextEnergy`: it reads ``<s> c x`` (our boundary id 0, the prefix,
the continuation), takes the encoder's top hidden states ``h`` and projects their mean over the
``S_b`` real positions (``pooling="mean"``) or the first position's state (``pooling="first"``, the
``[CLS]`` / ``<s>`` convention) to a scalar:

.. math::  E_\theta(c, x) = w^\top \frac{1}{S_b}\sum_{s < S_b} h_s + b .

The head starts at zero, so a fresh energy is 0 everywhere and the joint model starts as its base.

Two ways to build one:

* :meth:`HFTextEnergy.from_config` (``kind="bert"`` or ``"roberta"``): a fresh encoder over *our*
  vocabulary of ``V`` ids, sized like :class:`~ebms.nets.text_energy.TextEnergy` (``dim``,
  ``layers``, ``heads``, ``4 dim`` feed-forward width; :func:`hf_encoder_config`). It has two more
  embedding rows: the model's id 0 is our ``<s>``, id 1 is padding only (RoBERTa's layout), our id
  ``i >= 1`` is its ``i + 1``, and id ``V + 1`` is a mask token for masked-LM pretraining (the paper
  initialises BIT from a BERT trained on its own data: ``BertForMaskedLM(config)``, pretrained,
  then ``HFTextEnergy(that_model, token_map=...)``), so no real token is ever read as padding. No
  download; what the command line's ``residual.energy = "bert" | "roberta"`` builds.
* :meth:`HFTextEnergy.from_pretrained` (a hub name or a local folder): pretrained weights. Their
  ids are the model tokenizer's, so our id ``i`` is read as the model's id ``token_map[i]``; by
  default ``token_map`` is the identity with ``0`` and the model's start id (``bos_token_id``, else
  ``cls_token_id``) swapped, the convention of :class:`~ebms.models.lm.HuggingFaceLM`. Encode
  text with the model's tokenizer, drop its special tokens and apply the same swap; or pass your
  own ``token_map`` (for instance the table from a word vocabulary to the tokenizer's ids of
  single-piece words).

Padding. Rows are right-padded with the model's ``pad_token_id``; the attention mask hides it and
explicit position ids count real positions only (``0, 1, ...``, or ``p + 1, p + 2, ...`` for
encoders whose embeddings carry a ``padding_idx`` ``p``, as RoBERTa's do), so each row's energy
does not depend on the padding or on the other rows.

``transformers`` is imported lazily (``pip install 'ebms[text]'``); ``ebms`` imports without it.

Shapes: ``B`` rows, ``S = 1 + max(L_c + L_x)``, encoder width ``d``. Cost: one encoder forward on
``(B, S)`` ids.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int
from ebms._hf import hf_config, transformers_module
from ebms.nets.text_energy import _check_pair, _join, _mean_over
from ebms.sequences import Sequences

__all__ = ["HF_KINDS", "POOLINGS", "HFTextEnergy", "hf_encoder_config"]

#: encoder families :meth:`HFTextEnergy.from_config` builds.
HF_KINDS = ("bert", "roberta")
#: how the hidden states become one vector.
POOLINGS = ("mean", "first")
_INSTALL = "HFTextEnergy needs the transformers package: pip install 'ebms[text]' (or pip install transformers)"


def _transformers() -> Any:
    return transformers_module(_INSTALL)


def hf_encoder_config(kind: str, vocab_size: int, *, dim: int = 64, layers: int = 2, heads: int = 4,
                      dropout: float = 0.0, max_length: int = 256) -> tuple[Any, Tensor, int]:
    """The ``transformers`` configuration of a fresh ``kind`` (``"bert"``, ``"roberta"``) encoder over our ids.

    Width ``dim``, ``layers`` blocks of ``heads`` heads, feed-forward ``4 dim``, GELU, dropout ``dropout`` on
    hidden states and attention, positions for ``<s>`` plus ``max_length`` tokens, and ``vocab_size + 2`` model
    ids: 0 our ``<s>``, 1 padding, ``i + 1`` our id ``i >= 1``, ``vocab_size + 1`` a mask token that no input of the
    energy uses (for masked-LM pretraining, e.g. of ``BertForMaskedLM(config)``, whose ``base_model``
    :class:`HFTextEnergy` then reads with ``token_map``).

    Returns:
        ``(config, token_map, mask_id)``: a ``BertConfig`` or ``RobertaConfig``, the ``(vocab_size,)`` int64
        table of our ids to the model's, and the mask token's id.
    """
    if kind not in HF_KINDS:
        raise ValueError(f"kind: expected one of {', '.join(HF_KINDS)}; got {kind!r}")
    V = check_int(vocab_size, "vocab_size", minimum=2)
    dim, heads = check_int(dim, "dim", minimum=1), check_int(heads, "heads", minimum=1)
    if dim % heads:
        raise ValueError(f"heads: expected a divisor of dim={dim}; got {heads}")
    max_length = check_int(max_length, "max_length", minimum=1)
    t = _transformers()
    config_class = t.BertConfig if kind == "bert" else t.RobertaConfig
    base = 0 if kind == "bert" else 2  # RoBERTa's positions start after its padding id (1)
    config = config_class(vocab_size=V + 2, hidden_size=dim, num_hidden_layers=check_int(layers, "layers", minimum=1),
                          num_attention_heads=heads, intermediate_size=4 * dim, hidden_dropout_prob=float(dropout),
                          attention_probs_dropout_prob=float(dropout), max_position_embeddings=base + max_length + 1,
                          pad_token_id=1, bos_token_id=0, eos_token_id=None)
    table = torch.cat([torch.zeros(1, dtype=torch.int64), torch.arange(2, V + 1)])  # model id 1: padding only
    return config, table, V + 1


class HFTextEnergy(nn.Module):
    """Pooled scalar energy :math:`E_\\theta(c, x)` of ``<s> c x`` read by a Hugging Face encoder (module docstring).

    Args:
        model: a ``transformers`` encoder (``BertModel``, ``RobertaModel``, ...) or a model with one
            inside (``BertForMaskedLM``: its ``base_model`` is used, its LM head dropped). Its
            forward must take ``input_ids``, ``attention_mask`` and ``position_ids`` and return
            ``last_hidden_state``.
        vocab_size: ``V``, our ids ``[0, V - 1]`` (0 the boundary); default the model's
            ``config.vocab_size``.
        token_map: ``(V,)`` ids of the model that our ids stand for (default: the identity with 0 and
            ``start_id`` swapped; needs ``V <= config.vocab_size``).
        start_id: the model's id for our ``<s>`` when ``token_map`` is not given; default
            ``config.bos_token_id``, else ``config.cls_token_id``, else 0.
        pooling: ``"mean"`` (over real positions) or ``"first"``.

    Attributes:
        token_map: ``(V,)`` int64 buffer. ``pad_id``: the model's padding id. ``max_length``: the
            longest ``c x`` its positions cover (``<s>`` takes one).

    Call: ``energy(prefix, x) -> (B,)``, ``prefix`` and ``x`` :class:`~ebms.sequences.Sequences` of
    ``B`` rows each (either may be empty), token ids in ``[1, V - 1]``.

    Example:
        >>> e = HFTextEnergy.from_config("bert", 6, dim=8, layers=1, heads=2)
        >>> c, x = Sequences.from_lists([[1, 2], [3]]), Sequences.from_lists([[4], [5, 1]])
        >>> e(c, x).shape
        torch.Size([2])
    """

    token_map: Tensor

    def __init__(self, model: nn.Module, *, vocab_size: int | None = None, token_map: Tensor | None = None,
                 start_id: int | None = None, pooling: str = "mean") -> None:
        super().__init__()
        config = hf_config(model, "encoder", "BertModel", "an encoder (BERT, RoBERTa, ...)")
        base = getattr(model, "base_model", model)
        encoder = base if isinstance(base, nn.Module) else model
        params = inspect.signature(encoder.forward).parameters
        missing = [k for k in ("input_ids", "attention_mask", "position_ids") if k not in params]
        if missing:
            raise TypeError(f"model: {type(encoder).__name__}.forward takes no {', '.join(missing)}; expected an "
                            f"encoder such as BertModel or RobertaModel")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling: expected one of {', '.join(POOLINGS)}; got {pooling!r}")
        self.pooling = pooling
        model_vocab = check_int(getattr(config, "vocab_size", None), "model.config.vocab_size", minimum=2)
        if token_map is None:
            V = model_vocab if vocab_size is None else check_int(vocab_size, "vocab_size", minimum=2)
            if V > model_vocab:
                raise ValueError(f"vocab_size: the model has {model_vocab} ids; got {V}: pass token_map= (our id -> "
                                 f"the model's id) or a smaller vocabulary")
            if start_id is None:
                start_id = next((v for v in (getattr(config, "bos_token_id", None),
                                             getattr(config, "cls_token_id", None)) if v is not None), 0)
            start = check_int(start_id, "start_id", minimum=0)
            if start >= model_vocab:
                raise ValueError(f"start_id: expected a token id in [0, {model_vocab - 1}]; got {start}")
            table = torch.arange(V)
            if start < V:
                table[0], table[start] = start, 0
            else:
                table[0] = start
        else:
            if not isinstance(token_map, Tensor) or token_map.dim() != 1 or token_map.dtype.is_floating_point:
                raise TypeError("token_map: expected a 1-D integer tensor (our id -> the model's id)")
            table = token_map.detach().to("cpu", torch.int64).clone()
            if vocab_size is not None and check_int(vocab_size, "vocab_size", minimum=2) != len(table):
                raise ValueError(f"vocab_size: token_map has {len(table)} entries; got vocab_size={vocab_size}")
            if len(table) < 2 or int(table.min()) < 0 or int(table.max()) >= model_vocab:
                raise ValueError(f"token_map: expected at least 2 ids in [0, {model_vocab - 1}]")
        self.vocab_size = len(table)
        pad = getattr(config, "pad_token_id", None)
        self.pad_id = 0 if pad is None else check_int(pad, "model.config.pad_token_id", minimum=0)
        emb = getattr(encoder, "embeddings", None)
        offset = getattr(emb, "padding_idx", None)
        self._position_base = 0 if offset is None else int(offset) + 1
        positions = getattr(config, "max_position_embeddings", None)
        self.max_length = None if positions is None else int(positions) - self._position_base - 1
        self.register_buffer("token_map", table)
        self.encoder = encoder
        width = check_int(getattr(config, "hidden_size", None), "model.config.hidden_size", minimum=1)
        dtype = next((q.dtype for q in encoder.parameters() if q.dtype.is_floating_point), None)
        self.head = nn.Linear(width, 1, dtype=dtype)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_config(cls, kind: str, vocab_size: int, *, dim: int = 64, layers: int = 2, heads: int = 4,
                    dropout: float = 0.0, max_length: int = 256, pooling: str = "mean") -> HFTextEnergy:
        """A fresh ``kind`` (``"bert"`` or ``"roberta"``) encoder over our ``vocab_size`` ids: the configuration
        of :func:`hf_encoder_config` (its arguments), ``BertModel`` / ``RobertaModel`` without the pooler,
        ``transformers``' own initialisation."""
        config, table, _ = hf_encoder_config(kind, vocab_size, dim=dim, layers=layers, heads=heads, dropout=dropout,
                                             max_length=max_length)
        t = _transformers()
        model_class = t.BertModel if kind == "bert" else t.RobertaModel
        return cls(model_class(config, add_pooling_layer=False), token_map=table, pooling=pooling)

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, vocab_size: int | None = None, token_map: Tensor | None = None,
                        start_id: int | None = None, pooling: str = "mean", **kwargs: Any) -> HFTextEnergy:
        """``AutoModel.from_pretrained(name_or_path, **kwargs)`` (a hub name or a local folder) as an energy."""
        model = _transformers().AutoModel.from_pretrained(name_or_path, **kwargs)
        return cls(model, vocab_size=vocab_size, token_map=token_map, start_id=start_id, pooling=pooling)

    def inputs(self, prefix: Sequences, x: Sequences) -> tuple[Tensor, Tensor, Tensor]:
        """What the encoder reads for ``<s> c x``: ``(input_ids, real, position_ids)``, each ``(B, S)``.

        ``input_ids`` are the model's ids (``token_map`` applied, padding ``pad_id``), ``real`` is True at
        the ``S_b`` real positions (the attention mask), ``position_ids`` count real positions from the
        encoder's first position id. Masked-LM pretraining on the energy's own inputs starts here.
        """
        _check_pair(prefix, x, self.vocab_size)
        dev = self.head.weight.device
        tokens, lengths = _join(prefix.to(dev), x.to(dev))
        B, S = tokens.shape
        if self.max_length is not None and S - 1 > self.max_length:
            raise ValueError(f"x: <s> c x needs {S} positions; this energy covers <s> plus {self.max_length} tokens")
        pos = torch.arange(S, device=dev)
        real = pos < lengths.unsqueeze(1)
        ids = self.token_map[tokens].masked_fill(~real, self.pad_id)
        positions = (pos + self._position_base).expand(B, S).masked_fill(~real, max(self._position_base - 1, 0))
        return ids, real, positions

    def forward(self, prefix: Sequences, x: Sequences) -> Tensor:
        """Energies ``(B,)`` of the continuations ``x`` of ``prefix``.

        Raises:
            TypeError: ``prefix`` or ``x`` not :class:`~ebms.sequences.Sequences`.
            ValueError: different batch sizes, token ids outside ``[1, V - 1]``, ``c x`` longer than
                the model's positions.
        """
        ids, real, positions = self.inputs(prefix, x)
        if ids.shape[0] == 0:
            return self.head.weight.new_zeros(0)
        h = self.encoder(input_ids=ids, attention_mask=real.long(), position_ids=positions).last_hidden_state
        return self.head(h[:, 0] if self.pooling == "first" else _mean_over(h, real)).squeeze(-1)

    def extra_repr(self) -> str:
        return (f"vocab_size={self.vocab_size}, encoder={type(self.encoder).__name__}, pooling={self.pooling!r}, "
                f"max_length={self.max_length}")
