r"""Transcription and prediction networks of an aligned transducer, and their beam search.

An aligned transducer scores a tag sequence :math:`y_{1:T}` for words :math:`x_{1:T}` through two
networks (monograph section 4.4, eqs. 4.28-4.31; Hu, Ou et al. 2021, *CRF transducer*):

* the **transcription net** :math:`F` reads the words and outputs :math:`f_{1:T}\in\mathbb R^K`
  (a :class:`~ebms.nets.sequence.SequenceEncoder` followed by ``Linear -> K``);
* the **prediction net** :math:`G` reads the label history :math:`y_{0:i-1}` (:math:`y_0` =
  ``<bos>``, id ``K``) and outputs :math:`g_i\in\mathbb R^K` (label embedding, unidirectional
  LSTM, ``Linear -> K``): a label language model with unbounded history.

A model combines them through a *local score* ``local(f_i, g_i, prev) -> (..., K)``, the
log-potential of extending a history whose last tag is ``prev`` by each tag: ``f + g`` (CRF
transducer, design 1), ``log_softmax(f) + log_softmax(g)`` (design 2) or
``log_softmax(f + g)`` (aligned RNN-T). A sequence's score is the sum of its local scores.

:func:`transducer_beam_search` keeps the ``W`` best prefixes of every sentence of a batch at once:
at step ``i`` it runs ``G`` one step on all ``B W`` hypotheses, expands each by the ``K`` tags and
keeps the top ``W`` of the ``W K`` candidates. The scores it returns are differentiable (the
indices chosen by ``topk`` are not), which is what training with early updates needs. Given an
oracle ``tags``, it also reports whether the oracle prefix is among the live hypotheses after
each step. Cost per step: one LSTM step on ``B W`` rows and a ``(B, W K)`` top-k; ``T`` sequential
steps. There is no dynamic program: ``G`` makes the model non-Markov.

:class:`AlignedTransducer` is the shared base of :class:`~ebms.models.crf_transducer.CRFTransducer`
and :class:`~ebms.models.rnnt_aligned.AlignedRNNT`: it owns ``F``, ``G`` and the allowed-label
mask, checks inputs (:func:`check_tagging_batch`), and gives teacher-forced per-position scores
and beam-search decoding; a subclass only defines :meth:`AlignedTransducer.local`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ebms._checks import check_bool_mask, check_int, check_probability
from ebms.nets.sequence import SequenceEncoder

__all__ = [
    "AlignedTransducer",
    "BeamSearchResult",
    "PredictionNet",
    "TranscriptionNet",
    "check_tagging_batch",
    "transducer_beam_search",
]

NEG_INF = float("-inf")
LocalScore = Callable[[Tensor, Tensor, Tensor], Tensor]
State = tuple[Tensor, Tensor]


class TranscriptionNet(nn.Module):
    """``F``: words ``(B, T)`` -> ``f (B, T, K)`` by a :class:`SequenceEncoder` and a linear layer.

    Args:
        vocab_size, n_tags: word ids and tags ``K``.
        embedding_dim, hidden, kind, layers, dropout, char_vocab_size, char_dim: passed to the encoder.
    """

    def __init__(self, vocab_size: int, n_tags: int, *, embedding_dim: int = 50, hidden: int = 50,
                 kind: str = "bilstm", layers: int = 1, dropout: float = 0.0,
                 char_vocab_size: int | None = None, char_dim: int = 25) -> None:
        super().__init__()
        self.n_tags = check_int(n_tags, "n_tags", minimum=1)
        self.encoder = SequenceEncoder(vocab_size, embedding_dim, hidden, kind=kind, layers=layers,
                                       dropout=dropout, char_vocab_size=char_vocab_size, char_dim=char_dim)
        self.out = nn.Linear(self.encoder.out_dim, n_tags)

    def forward(self, words: Tensor, lengths: Tensor, chars: Tensor | None = None) -> Tensor:
        """``f (B, T, K)``; rows beyond ``lengths`` hold the bias only and are never used."""
        return self.out(self.encoder(words, lengths, chars))


class PredictionNet(nn.Module):
    """``G``: label history -> ``g_i (K,)``; embedding of ``K + 1`` labels (``K`` = ``<bos>``),
    a unidirectional LSTM and a linear layer.

    Two equivalent interfaces: :meth:`forward` teacher-forces a whole tag sequence, and
    :meth:`initial_state` / :meth:`step` run one label at a time for beam search.

    Args:
        n_tags: tags ``K``.
        embedding_dim: label embedding width.
        hidden: LSTM width.
        layers: LSTM layers.
        dropout: dropout on the embeddings and the LSTM output (training only).
    """

    def __init__(self, n_tags: int, *, embedding_dim: int = 16, hidden: int = 32, layers: int = 1,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.n_tags = check_int(n_tags, "n_tags", minimum=1)
        self.bos = n_tags
        check_int(embedding_dim, "embedding_dim", minimum=1)
        self.hidden = check_int(hidden, "hidden", minimum=1)
        self.layers = check_int(layers, "layers", minimum=1)
        check_probability(dropout, "dropout", open_high=True)
        self.embed = nn.Embedding(n_tags + 1, embedding_dim)
        self.rnn = nn.LSTM(embedding_dim, hidden, num_layers=layers, batch_first=True,
                           dropout=dropout if layers > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, n_tags)

    def previous(self, tags: Tensor) -> Tensor:
        """Inputs ``[<bos>, y_1, ..., y_{T-1}]`` for ``tags (B, T)`` (ids in ``[0, K)``)."""
        bos = tags.new_full((tags.shape[0], 1), self.bos)
        return torch.cat([bos, tags[:, :-1]], dim=1)

    def forward(self, tags: Tensor) -> Tensor:
        """Teacher-forced ``g (B, T, K)``: ``g[:, i]`` depends on ``tags[:, :i]`` only."""
        h, _ = self.rnn(self.drop(self.embed(self.previous(tags))))
        return self.out(self.drop(h))

    def initial_state(self, n: int, *, device: torch.device | None = None) -> State:
        """Zero LSTM state ``(h, c)``, each ``(layers, n, hidden)``, for ``n`` histories."""
        z = torch.zeros(self.layers, n, self.hidden, device=device, dtype=self.out.weight.dtype)
        return z, z.clone()

    def step(self, prev: Tensor, state: State) -> tuple[Tensor, State]:
        """One step: last labels ``prev (N,)`` (``<bos>`` = ``K`` first) -> ``g (N, K)``, new state."""
        h, new = self.rnn(self.drop(self.embed(prev)).unsqueeze(1), state)
        return self.out(self.drop(h[:, 0])), new


@dataclass(frozen=True)
class BeamSearchResult:
    """What :func:`transducer_beam_search` returns.

    Attributes:
        tags: ``(B, T)`` best hypothesis per sentence, ``-1`` beyond each length.
        scores: ``(B,)`` its score (differentiable).
        beam_tags: ``(B, W, T)`` final beam, best first, ``-1`` beyond each length.
        beam_scores: ``(B, W)`` their scores, ``-inf`` for empty slots.
        step_scores: per step ``i``, the ``(B, W)`` beam scores after step ``i + 1`` (kept only
            when an oracle was given).
        in_beam: ``(B, T)`` bool, the oracle prefix ``y*_{1:i+1}`` is a live hypothesis after step
            ``i + 1`` (``True`` beyond each length); ``None`` without an oracle.
    """

    tags: Tensor
    scores: Tensor
    beam_tags: Tensor
    beam_scores: Tensor
    step_scores: list[Tensor]
    in_beam: Tensor | None

    @property
    def argmax(self) -> Tensor:
        """``tags``: the best hypothesis ``(B, T)``, so a transducer decodes where a CRF tagger's
        distribution does (``model(*inputs, lengths).argmax``, :mod:`ebms.metrics.tagger_eval`)."""
        return self.tags


def transducer_beam_search(f: Tensor, lengths: Tensor, prediction: PredictionNet, local: LocalScore,
                           *, beam: int, oracle: Tensor | None = None,
                           stop_when_lost: bool = False) -> BeamSearchResult:
    """Beam search of ``max_y sum_i local(f_i, g_i(y_{<i}), y_{i-1})[y_i]`` for a batch.

    Args:
        f: ``(B, T, K)`` transcription outputs.
        lengths: ``(B,)`` long, values in ``[1, T]`` (checked by the caller).
        prediction: the prediction network ``G``.
        local: ``(f_i (B, W, K), g_i (B, W, K), prev (B, W)) -> (B, W, K)`` local log-potentials.
        beam: beam width ``W >= 1``.
        oracle: optional ``(B, T)`` gold tags (valid ids everywhere), tracked through the search.
        stop_when_lost: with an oracle, stop once every sentence has lost its oracle prefix or
            ended (the later steps are not needed for an early update).
    """
    b, t, k = f.shape
    w = check_int(beam, "beam", minimum=1)
    dev = f.device
    scores = f.new_full((b, w), NEG_INF)
    scores[:, 0] = 0.0
    prev = torch.full((b, w), prediction.bos, dtype=torch.long, device=dev)
    hist = torch.full((b, w, t), -1, dtype=torch.long, device=dev)
    state = prediction.initial_state(b * w, device=dev)
    match = torch.ones(b, w, dtype=torch.bool, device=dev) if oracle is not None else None
    in_beam = torch.ones(b, t, dtype=torch.bool, device=dev) if oracle is not None else None
    step_scores: list[Tensor] = []
    for i in range(t):
        g, new_state = prediction.step(prev.reshape(-1), state)
        cand = scores.unsqueeze(-1) + local(f[:, i].unsqueeze(1).expand(b, w, k), g.view(b, w, k), prev)
        top, idx = cand.reshape(b, w * k).topk(w, dim=-1)
        parent, label = idx // k, idx % k
        live = (i < lengths).unsqueeze(1)  # (B, 1): this step is inside the sentence
        flat = (parent + torch.arange(b, device=dev).unsqueeze(1) * w).reshape(-1)
        new_hist = hist.gather(1, parent.unsqueeze(-1).expand(b, w, t)).clone()
        new_hist[:, :, i] = label
        hist = torch.where(live.unsqueeze(-1), new_hist, hist)
        scores = torch.where(live, top, scores)
        keep = live.reshape(-1).view(1, b, 1).repeat_interleave(w, dim=1)
        state = tuple(torch.where(keep, s.index_select(1, flat), old)  # type: ignore[assignment]
                      for s, old in zip(new_state, state))
        prev = torch.where(live, label, prev)
        if oracle is not None:
            assert match is not None and in_beam is not None
            m = match.gather(1, parent) & (label == oracle[:, i : i + 1])
            match = torch.where(live, m & torch.isfinite(top), match)
            in_beam[:, i] = match.any(1) | ~live[:, 0]
            step_scores.append(scores)
            if stop_when_lost and not bool((in_beam[:, i] & (i + 1 < lengths)).any()):
                break
    order = scores.argsort(dim=1, descending=True)
    beam_scores = scores.gather(1, order)
    beam_tags = hist.gather(1, order.unsqueeze(-1).expand(b, w, t))
    return BeamSearchResult(beam_tags[:, 0], beam_scores[:, 0], beam_tags, beam_scores, step_scores, in_beam)


def check_tagging_batch(words: Tensor, lengths: Tensor, tags: Tensor | None, n_tags: int) -> Tensor | None:
    """Validate a padded tagging batch; returns ``tags`` (long) with padding replaced by ``0``.

    ``words (B, T)`` long with ``B >= 1``; ``lengths (B,)`` integers in ``[1, T]``; ``tags (B, T)``
    integers in ``[0, K)`` at the positions inside each length (anything beyond is ignored).
    """
    if not isinstance(words, Tensor) or words.dim() != 2 or words.dtype != torch.long:
        got = f"{tuple(words.shape)} {words.dtype}" if isinstance(words, Tensor) else type(words).__name__
        raise ValueError(f"words: expected a (B, T) long tensor of token ids; got {got}")
    b, t = words.shape
    if b == 0 or t == 0:
        raise ValueError(f"words: expected a non-empty batch (B >= 1, T >= 1); got shape {(b, t)}")
    if (not isinstance(lengths, Tensor) or tuple(lengths.shape) != (b,) or lengths.is_floating_point()
            or lengths.dtype == torch.bool):
        got = f"{tuple(lengths.shape)} {lengths.dtype}" if isinstance(lengths, Tensor) else type(lengths).__name__
        raise ValueError(f"lengths: expected a ({b},) integer tensor; got {got}")
    if int(lengths.min()) < 1 or int(lengths.max()) > t:
        raise ValueError(f"lengths: expected values in [1, {t}] (the padded length of words); "
                         f"got min {int(lengths.min())}, max {int(lengths.max())}")
    if tags is None:
        return None
    if not isinstance(tags, Tensor) or tags.is_floating_point() or tags.dtype == torch.bool:
        got = str(tags.dtype) if isinstance(tags, Tensor) else type(tags).__name__
        raise TypeError(f"tags: expected an integer tensor; got {got}")
    if tuple(tags.shape) != (b, t):
        raise ValueError(f"tags: expected shape {(b, t)} (the shape of words); got {tuple(tags.shape)}")
    valid = torch.arange(t, device=tags.device) < lengths.to(tags.device)[:, None]
    inside = tags[valid]
    if int(inside.min()) < 0 or int(inside.max()) >= n_tags:
        raise ValueError(f"tags: expected values in [0, {n_tags - 1}] within each length; "
                         f"got min {int(inside.min())}, max {int(inside.max())}")
    return tags.long().masked_fill(~valid, 0)


class AlignedTransducer(nn.Module, abc.ABC):
    """Base of the aligned transducers: ``F``, ``G``, an allowed-label mask, teacher-forced
    scores and beam search; subclasses define :meth:`local`.

    Args:
        vocab_size, n_tags: word ids and tags ``K``.
        embedding_dim, hidden, kind, layers, dropout, char_vocab_size, char_dim: the transcription encoder.
        label_dim, label_hidden, label_layers: the prediction network (no dropout there, so that
            teacher-forced and incremental scores agree in training mode too).
        allowed: optional ``(K, K)`` bool, ``allowed[j, k]``: tag ``k`` may follow tag ``j``
            (e.g. from :func:`ebms.structured.linear_chain.bio_allowed_transitions`).
        allowed_start: optional ``(K,)`` bool, the tags a sentence may start with.

    Attributes:
        label_bias: ``(K + 1, K)`` buffer, ``0`` or ``-inf``; row ``K`` is for ``<bos>``.
    """

    label_bias: Tensor

    def __init__(self, vocab_size: int, n_tags: int, *, embedding_dim: int = 50, hidden: int = 50,
                 kind: str = "bilstm", layers: int = 1, dropout: float = 0.0,
                 char_vocab_size: int | None = None, char_dim: int = 25, label_dim: int = 16, label_hidden: int = 32,
                 label_layers: int = 1, allowed: Tensor | None = None,
                 allowed_start: Tensor | None = None) -> None:
        super().__init__()
        self.n_tags = check_int(n_tags, "n_tags", minimum=1)
        self.transcription = TranscriptionNet(vocab_size, n_tags, embedding_dim=embedding_dim, hidden=hidden,
                                              kind=kind, layers=layers, dropout=dropout,
                                              char_vocab_size=char_vocab_size, char_dim=char_dim)
        self.prediction = PredictionNet(n_tags, embedding_dim=label_dim, hidden=label_hidden, layers=label_layers)
        bias = torch.zeros(n_tags + 1, n_tags)
        a = check_bool_mask(allowed, (n_tags, n_tags), "allowed")
        s = check_bool_mask(allowed_start, (n_tags,), "allowed_start")
        if a is not None:
            bias[:n_tags].masked_fill_(~a.cpu(), NEG_INF)
        if s is not None:
            bias[n_tags].masked_fill_(~s.cpu(), NEG_INF)
        self.register_buffer("label_bias", bias)

    @abc.abstractmethod
    def local(self, f: Tensor, g: Tensor, prev: Tensor) -> Tensor:
        """Local log-potentials ``(..., K)`` from ``f, g (..., K)`` and previous tags ``prev (...)``."""

    def local_scores(self, words: Tensor, lengths: Tensor, tags: Tensor, *, chars: Tensor | None = None) -> Tensor:
        """Teacher-forced per-position scores ``local(f_i, g_i, y_{i-1})[y_i]``, ``(B, T)``, ``0``
        beyond each length."""
        y = check_tagging_batch(words, lengths, tags, self.n_tags)
        assert y is not None
        f = self.transcription(words, lengths, chars)
        loc = self.local(f, self.prediction(y), self.prediction.previous(y)).gather(-1, y.unsqueeze(-1)).squeeze(-1)
        valid = torch.arange(y.shape[1], device=y.device) < lengths.to(y.device)[:, None]
        return torch.where(valid, loc, loc.new_zeros(()))

    def forward(self, words: Tensor, lengths: Tensor, chars: Tensor | None = None, *,
                beam: int = 8) -> BeamSearchResult:
        """Beam search of a padded batch, the whole :class:`BeamSearchResult` (its ``argmax`` the best tags
        ``(B, T)``, ``-1`` beyond each length): the decoding call of the taggers, ``model(*inputs, lengths)``.

        The ``(*inputs, lengths)`` order ``model(words, chars, lengths)`` is accepted too (a 3-D second
        argument with a 1-D third one is read as ``chars, lengths``), as by
        :meth:`ebms.models.NeuralCRFTagger.forward`.
        """
        if isinstance(lengths, Tensor) and isinstance(chars, Tensor) and lengths.dim() == 3 and chars.dim() == 1:
            lengths, chars = chars, lengths
        check_tagging_batch(words, lengths, None, self.n_tags)
        check_int(beam, "beam", minimum=1)
        f = self.transcription(words, lengths, chars)
        return transducer_beam_search(f, lengths.to(f.device).long(), self.prediction, self.local, beam=beam)

    def beam_search(self, words: Tensor, lengths: Tensor, *, beam: int = 8,
                    chars: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Approximate ``argmax_y`` of the sequence score by beam search of width ``beam``.

        Returns ``tags (B, T)`` (``-1`` beyond each length) and their scores ``(B,)``. Exact when
        ``beam >= K^T``. Cost ``O(T B W K)`` plus ``T`` LSTM steps on ``B W`` rows.
        """
        res = self(words, lengths, chars, beam=beam)
        return res.tags, res.scores
