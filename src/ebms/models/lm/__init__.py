r"""Neural autoregressive language models: LSTM and Transformer, word or character level.

A sentence LM here is an :class:`ebms.distributions.Distribution` over all finite sentences of
token ids ``>= 1``; id 0 is the boundary (``<s>`` fed before the first token, ``</s>`` predicted
after the last), the convention of :class:`ebms.distributions.NGram` and
``ebms.data.text.Vocabulary``::

    lm = LSTMLM(V, embedding_dim=256, hidden_size=256, num_layers=2, dropout=0.3, tie_weights=True)
    lm.log_prob(x)                     # (B,) exact log p(y), </s> included      x: Sequences
    lm.token_log_probs(x)              # (B, T + 1), padding positions 0
    lm.logits(x)                       # (B, T + 1, V)
    lm.continuation_log_prob(c, x)     # (B,) log p(x | c) (end=False: without </s>)
    lm.sample(n, generator=g, temperature=0.8, top_k=50, top_p=0.95, prefix=c)   # Sequences
    perplexity(lm.eval(), batches)     # exp(-sum log p / (tokens + sentences))

Train with :class:`ebms.objectives.AutoregressiveNLL` under the :class:`~ebms.train.Trainer`,
per sentence (``Sequences`` or ``(tokens, lengths)`` batches) or on running text with truncated
BPTT (``(inputs, targets)`` chunks of :func:`ebms.data.text.bptt_batches`, ``carry_state=True``).

Members: :class:`LSTMLM` (:class:`LSTMState`), :class:`ClassFactoredLSTMLM` (its class-factored output
layer: scoring and sampling in ``O(C + |c|)`` per token, a cheap NCE/DNCE noise), :class:`TransformerLM`
(:class:`KVCache`), :class:`ProductLM` (a frozen base times a trained expert, normalised per step: the
RALM baseline of residual EBMs), their
base :class:`AutoregressiveLM` (:class:`LMState`), :func:`filter_logits` (temperature, top-k, top-p),
:func:`perplexity` (:class:`Perplexity`).
"""

from ebms.models.lm._base import AutoregressiveLM, LMState
from ebms.models.lm._filter import filter_logits
from ebms.models.lm._steps import LMAdapter
from ebms.models.lm.class_factored import ClassFactoredLSTMLM
from ebms.models.lm.huggingface import HFState, HuggingFaceLM
from ebms.models.lm.lstm import LSTMLM, LSTMState
from ebms.models.lm.perplexity import Perplexity, perplexity
from ebms.models.lm.product import ProductLM, ProductState
from ebms.models.lm.transformer import KVCache, TransformerLM

__all__ = [
    "AutoregressiveLM",
    "ClassFactoredLSTMLM",
    "KVCache",
    "LMAdapter",
    "LMState",
    "LSTMLM",
    "LSTMState",
    "Perplexity",
    "ProductLM",
    "ProductState",
    "TransformerLM",
    "filter_logits",
    "perplexity",
    "HFState",
    "HuggingFaceLM",
]
