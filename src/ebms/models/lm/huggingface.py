r"""A Hugging Face causal language model (GPT-2, Llama, GPT-NeoX, ...) as an ebms sentence LM.

:class:`HuggingFaceLM` wraps a decoder-only model of the ``transformers`` library (Wolf et al.
2020, *Transformers: State-of-the-art natural language processing*), for instance GPT-2 (Radford
et al. 2019, *Language models are unsupervised multitask learners*), so that it scores and draws
sentences under the contract of :mod:`ebms.models.lm` — and becomes, in one call, the base LM of a
residual EBM, a proposal, or a model fine-tuned with :class:`ebms.objectives.AutoregressiveNLL`::

    lm = HuggingFaceLM.from_pretrained("gpt2").eval()          # or HuggingFaceLM(my_gpt2_model)
    enc = tokenizer(texts, return_tensors="pt", padding=True)   # GPT-2: tokenizer.pad_token = eos
    x = lm.from_hf_ids(enc["input_ids"], enc["attention_mask"])  # ebms Sequences
    lm.log_prob(x)                                              # (B,) log p(y), </s> included

Token ids. ebms reserves id 0 for the sentence boundary (``<s>`` fed before the first token,
``</s>`` predicted after the last). A Hugging Face model has its own boundary token, ``b`` (by
default ``config.eos_token_id``: 50256 ``<|endoftext|>`` for GPT-2, which uses it as both
``bos`` and ``eos``). Our ids are the model's ids with ``0`` and ``b`` swapped: our id ``i`` is the
model's id ``permutation[i]``, where ``permutation`` swaps ``0 <-> b`` and fixes every other id
(an involution, so the same table maps back). The next-token logits are permuted the same way
(column ``i`` of ours is column ``permutation[i]`` of the model's), so ``</s>`` (our column 0) is
the model's ``eos``. When the model starts sentences with a different ``bos`` token (Llama:
``bos = 1``, ``eos = 2``), our ``<s>`` input is fed as ``bos_id`` (default ``config.bos_token_id``);
that token, as an outcome, keeps its own (permuted) id. Our id 1 is the model's token 1 (not
an ``<unk>`` of :class:`ebms.data.text.Vocabulary`): encode text with the model's tokenizer and
convert with :meth:`HuggingFaceLM.from_hf_ids` / :meth:`HuggingFaceLM.to_hf_ids`.

Ragged batches. Histories of different lengths are right-padded; the attention mask hides the
padding and explicit position ids count real tokens only, so each row's scores do not depend on
the padding or on the other rows. Incremental decoding carries the model's key/value cache
(:class:`HFState`); finished draws leave the batch through :meth:`HFState.select`.

``transformers`` is imported lazily, inside this module's functions only: ``ebms`` imports
without it. Written and tested against transformers 5.24 (its layered key/value cache:
``DynamicCache`` of ``DynamicLayer``; the forward keyword ``cache``, or ``past_key_values`` in
versions that still name it so). Sliding-window, linear-attention and quantised caches are refused.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int
from ebms._hf import hf_config, transformers_module
from ebms.models.lm._base import AutoregressiveLM, LMState
from ebms.sequences import Sequences

__all__ = ["HFState", "HuggingFaceLM"]

_INSTALL = "HuggingFaceLM needs the transformers package: pip install transformers"
_POSITION_KEYS = ("n_positions", "max_position_embeddings", "n_ctx")


def _transformers() -> Any:
    return transformers_module(_INSTALL)


def _token_id(value: Any, name: str, vocab_size: int) -> int:
    value = check_int(value, name, minimum=0)
    if value >= vocab_size:
        raise ValueError(f"{name}: expected a token id in [0, {vocab_size - 1}]; got {value}")
    return value


@dataclass(frozen=True)
class HFState(LMState):
    """The key/value cache of a Hugging Face model after a batch of histories.

    ``keys[l]``, ``values[l]``: layer ``l``'s cached keys and values, ``(B, heads, P, head_dim)``;
    ``mask``: ``(B, P)`` int64 attention mask (1 = a real input, 0 = padding); ``positions``:
    ``(B,)`` the position id of each row's next input. The tensors are never modified in place
    (each step builds a fresh cache object from them), so a state can be reused or branched.
    """

    keys: tuple[Tensor, ...]
    values: tuple[Tensor, ...]
    mask: Tensor
    positions: Tensor

    @property
    def batch_size(self) -> int:
        return int(self.positions.shape[0])

    def detach(self) -> HFState:
        return HFState(tuple(k.detach() for k in self.keys), tuple(v.detach() for v in self.values),
                       self.mask, self.positions)

    def select(self, index: Tensor) -> HFState:
        return HFState(tuple(k[index] for k in self.keys), tuple(v[index] for v in self.values),
                       self.mask[index], self.positions[index])


class HuggingFaceLM(AutoregressiveLM):
    """A ``transformers`` decoder-only causal LM under the ebms sentence-LM contract (module docstring).

    Args:
        model: the Hugging Face model, e.g. ``GPT2LMHeadModel`` or ``LlamaForCausalLM`` (a torch
            module with a ``config`` whose forward takes ``input_ids``, ``attention_mask``,
            ``position_ids`` and a key/value cache). It becomes the submodule ``model``: its
            parameters are this LM's parameters (trainable, moved by ``.to``), its mode is kept.
        boundary_id: the model's token id that our id 0 stands for (``</s>`` as an outcome);
            default ``config.eos_token_id`` (the first one when the config lists several).
        bos_id: the model's token id fed for our ``<s>``; default ``config.bos_token_id``, else
            ``boundary_id``.
        max_length: the longest sentence scored or drawn (prefix included); default the model's
            positions (``n_positions`` or ``max_position_embeddings``) minus one for ``<s>``, or
            ``None`` (unbounded) when the config states none. At most that default.

    Attributes:
        permutation: ``(V,)`` int64 buffer; our id ``i`` is the model's id ``permutation[i]``.
        boundary_id, bos_id: the model's boundary and start ids.

    Shapes: ``B`` rows, ``S`` inputs, ``V = config.vocab_size`` (both id spaces). Cost: the model's
    own forward, plus one ``(B, S, V)`` column gather for the permutation (skipped when
    ``boundary_id = 0``) and, per incremental step, one copy of the cache (``O(t)`` at length ``t``).

    Raises:
        TypeError: ``model`` is not a torch module with a ``config``.
        ValueError: an encoder-decoder model; ids outside the vocabulary; no ``eos_token_id`` and no
            ``boundary_id``; ``max_length`` beyond the model's positions.
    """

    max_length: int | None
    permutation: Tensor
    _feed: Tensor

    def __init__(self, model: nn.Module, *, boundary_id: int | None = None, bos_id: int | None = None,
                 max_length: int | None = None) -> None:
        super().__init__()
        config = hf_config(model, "causal LM", "GPT2LMHeadModel", "a decoder-only causal LM")
        self.vocab_size = check_int(getattr(config, "vocab_size", None), "model.config.vocab_size", minimum=2)
        if boundary_id is None:
            boundary_id = config.eos_token_id
            if isinstance(boundary_id, (list, tuple)):
                boundary_id = boundary_id[0] if boundary_id else None
            if boundary_id is None:
                raise ValueError("boundary_id: the model's config has no eos_token_id; pass boundary_id= "
                                 "(the model's end-of-text token id)")
        self.boundary_id = _token_id(boundary_id, "boundary_id", self.vocab_size)
        if bos_id is None:
            bos_id = getattr(config, "bos_token_id", None)
            bos_id = self.boundary_id if bos_id is None else bos_id
        self.bos_id = _token_id(bos_id, "bos_id", self.vocab_size)
        bound = next((getattr(config, k) for k in _POSITION_KEYS if isinstance(getattr(config, k, None), int)), None)
        if max_length is None:
            self.max_length = None if bound is None else bound - 1
        else:
            self.max_length = check_int(max_length, "max_length", minimum=1)
            if bound is not None and self.max_length > bound - 1:
                raise ValueError(f"max_length: the model has {bound} positions (<s> plus at most {bound - 1} "
                                 f"tokens); got {self.max_length}")
        params = inspect.signature(model.forward).parameters
        self._cache_keyword = "cache" if "cache" in params else "past_key_values"
        perm = torch.arange(self.vocab_size)
        perm[0], perm[self.boundary_id] = self.boundary_id, 0
        feed = perm.clone()
        feed[0] = self.bos_id
        self.register_buffer("permutation", perm, persistent=False)
        self.register_buffer("_feed", feed, persistent=False)
        self.model = model
        self.train(model.training)

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, boundary_id: int | None = None, bos_id: int | None = None,
                        max_length: int | None = None, **kwargs: Any) -> HuggingFaceLM:
        """Load ``AutoModelForCausalLM.from_pretrained(name_or_path, **kwargs)`` (a hub name or a local
        directory; keyword arguments such as ``torch_dtype`` pass through) and wrap it, in eval mode."""
        model = _transformers().AutoModelForCausalLM.from_pretrained(name_or_path, **kwargs)
        return cls(model.eval(), boundary_id=boundary_id, bos_id=bos_id, max_length=max_length)

    # --- the network ----------------------------------------------------------------------------
    def _run(self, inputs: Tensor, mask: Tensor, positions: Tensor, state: HFState | None) -> tuple[Tensor, HFState]:
        """One model call on our ids; logits in our column order and the new state."""
        cache = None
        if state is not None and state.keys:
            cache = _transformers().DynamicCache(list(zip(state.keys, state.values)))
        out = self.model(input_ids=self._feed[inputs], attention_mask=mask, position_ids=positions, use_cache=True,
                         **{self._cache_keyword: cache})
        logits = out.logits
        if logits.shape[-1] != self.vocab_size:
            raise ValueError(f"model: its logits have {logits.shape[-1]} columns; config.vocab_size is "
                             f"{self.vocab_size}")
        if self.boundary_id != 0:
            logits = logits.index_select(-1, self.permutation)
        keys, values = self._unpack(getattr(out, self._cache_keyword, None))
        return logits, HFState(keys, values, mask, positions[:, -1] + 1)

    @staticmethod
    def _unpack(cache: Any) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
        if cache is None:
            raise ValueError("model: its forward returned no key/value cache with use_cache=True")
        layers = getattr(cache, "layers", None)
        if layers is None:  # legacy tuples ((k, v), ...)
            pairs = [(kv[0], kv[1]) for kv in cache]
        else:
            plain = _transformers().cache_utils.DynamicLayer
            for layer in layers:
                if type(layer) is not plain:
                    raise TypeError(f"model: HuggingFaceLM supports full-attention key/value caches (DynamicLayer); "
                                    f"this model's cache has a {type(layer).__name__} layer")
            pairs = [(layer.keys, layer.values) for layer in layers]
        return tuple(k for k, _ in pairs), tuple(v for _, v in pairs)

    def forward(self, inputs: Tensor, state: LMState | None = None) -> tuple[Tensor, HFState]:
        """Logits ``(B, S, V)`` (our column order) after each of ``inputs (B, S)`` (our ids) and the cache
        after the last input (``state``: the :class:`HFState` of the previous call, or ``None``).

        Raises:
            TypeError: ``state`` is not an :class:`HFState`.
            ValueError: a position beyond ``max_length``.
        """
        self._check_inputs(inputs)
        if state is not None and not isinstance(state, HFState):
            raise TypeError(f"state: expected an HFState or None; got {type(state).__name__}")
        B, S = inputs.shape
        dev = inputs.device
        width = 0 if state is None else int(state.mask.shape[1])
        if self.max_length is not None and width + S - 1 > self.max_length:
            raise ValueError(f"inputs: position {width + S - 1} exceeds max_length={self.max_length} (positions "
                             "0..max_length); use shorter sequences or a model with more positions")
        ones = torch.ones(B, S, dtype=torch.long, device=dev)
        steps = torch.arange(S, device=dev)
        if state is None:
            mask, positions = ones, steps.expand(B, S)
        else:
            mask, positions = torch.cat([state.mask, ones], 1), state.positions.unsqueeze(1) + steps
        if S == 0:
            empty = torch.zeros(B, 0, self.vocab_size, dtype=self._dtype(), device=dev)
            start = torch.zeros(B, dtype=torch.long, device=dev) if state is None else state.positions
            return empty, (HFState((), (), mask, start) if state is None else state)
        return self._run(inputs, mask, positions, state)

    def _encode(self, histories: Tensor, lengths: Tensor) -> tuple[Tensor, HFState]:
        B, S = histories.shape
        steps = torch.arange(S, device=histories.device)
        mask = (steps < lengths.unsqueeze(1)).long()
        logits, state = self._run(histories, mask, steps.expand(B, S), None)
        last = logits.gather(1, (lengths - 1).view(-1, 1, 1).expand(-1, 1, logits.shape[-1])).squeeze(1)
        return last, HFState(state.keys, state.values, mask, lengths.clone())

    # --- id conversion --------------------------------------------------------------------------
    def from_hf_ids(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Sequences:
        """Tokenizer output (the model's ids, left- or right-padded) -> ebms :class:`Sequences`.

        Keeps the positions where ``attention_mask`` is 1 (all when ``None``), in order; drops a
        leading ``bos_id`` and a trailing ``boundary_id`` (boundary roles, implied by the contract);
        maps the rest through :attr:`permutation`.

        Args:
            input_ids: ``(B, T)`` integer ids of the model.
            attention_mask: ``(B, T)`` 0/1 (or bool) mask of the real positions.

        Raises:
            ValueError: shapes differ, an id outside the vocabulary, or ``boundary_id`` inside a sentence
                (split the text into sentences first).
        """
        if not isinstance(input_ids, Tensor) or input_ids.dim() != 2 or input_ids.dtype.is_floating_point:
            raise TypeError(f"input_ids: expected an integer tensor (B, T); got "
                            f"{getattr(input_ids, 'shape', type(input_ids).__name__)}")
        ids = input_ids.long().to(self.permutation.device)
        keep = torch.ones_like(ids, dtype=torch.bool) if attention_mask is None else attention_mask.to(ids.device) != 0
        if keep.shape != ids.shape:
            raise ValueError(f"attention_mask: expected the shape of input_ids {tuple(ids.shape)}; got "
                             f"{tuple(keep.shape)}")
        if bool((keep & ((ids < 0) | (ids >= self.vocab_size))).any()):
            raise ValueError(f"input_ids: expected ids in [0, {self.vocab_size - 1}] at the real positions")
        if ids.shape[1] == 0:
            return Sequences(ids, torch.zeros(ids.shape[0], dtype=torch.long, device=ids.device), validate=False)
        order = torch.sort((~keep).to(torch.uint8), dim=1, stable=True).indices  # real positions first, in order
        ids, lengths = ids.gather(1, order), keep.sum(1)
        lead = (lengths > 0) & (ids[:, 0] == self.bos_id)
        ids, lengths = torch.where(lead.unsqueeze(1), ids.roll(-1, 1), ids), lengths - lead.long()
        last = ids.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        lengths = lengths - ((lengths > 0) & (last == self.boundary_id)).long()
        real = torch.arange(ids.shape[1], device=ids.device) < lengths.unsqueeze(1)
        ours = torch.where(real, self.permutation[ids], 0)
        inner = real & (ours == 0)
        if bool(inner.any()):
            b, t = (int(i) for i in inner.nonzero()[0])
            raise ValueError(f"input_ids: row {b} has the boundary token {self.boundary_id} inside the sentence "
                             f"(real position {t}); split the text into sentences first")
        width = int(lengths.max()) if lengths.numel() else 0
        return Sequences(ours[:, :width], lengths, validate=False)

    def to_hf_ids(self, x: Sequences | Tensor) -> tuple[Tensor, Tensor]:
        """ebms sentences -> ``(input_ids (B, T), attention_mask (B, T))`` in the model's ids, right-padded
        with ``boundary_id`` (no ``bos``/``eos`` added), e.g. for ``tokenizer.batch_decode(input_ids,
        skip_special_tokens=True)``."""
        seqs = self._sequences(x, "x")
        mask = seqs.mask()
        ids = torch.where(mask, self.permutation[seqs.tokens.clamp(0, self.vocab_size - 1)], self.boundary_id)
        return ids, mask.long()

    def extra_repr(self) -> str:
        return (f"vocab_size={self.vocab_size}, boundary_id={self.boundary_id}, bos_id={self.bos_id}, "
                f"max_length={self.max_length}")
