"""Networks that return energies (``(B,)``) or logits. Architectures only, no training logic.

* :class:`MLPEnergy` — fully connected energy for vectors (inputs are
  flattened), with an analytic input gradient for fast gradient samplers.
* :class:`ConvEnergy` — residual conv energy for images, GroupNorm (never
  BatchNorm: energies must not depend on the rest of the batch).
* :class:`GaussianEnergy`, :class:`GaussianMixtureEnergy` — closed-form
  references with known normalisers.

* :class:`SequenceEncoder` — word (+ character CNN) embeddings and a BiLSTM or CNN over tokens.
* :class:`ConvBiLSTM` — a subsampling conv + BiLSTM acoustic model returning CTC log-probabilities.
* :class:`TranscriptionNet`, :class:`PredictionNet`, :class:`AlignedTransducer` and
  :func:`transducer_beam_search` — the networks and the beam search of aligned transducers
  (RNN-T, CRF transducer).

Activations are :class:`Activation` objects; names (``"silu"``, ``"tanh"``,
...) are resolved once by :func:`resolve_activation`.

Speed paths that rely on private PyTorch APIs are checked once at import against the public route
and switched off when missing or different: :func:`fast_paths` reports the decision,
:func:`disabled` (or ``EBMS_DISABLE_FAST_PATHS=1``) forces the public route.
* :class:`ConvClassifier`, :class:`MLPClassifier` — classifiers returning logits ``(B, K)`` (GroupNorm, optional
  spectral norm), the networks of JEM (:class:`~ebms.models.JEM`).
* :class:`TextEnergy`, :class:`HFTextEnergy` — sequence energies ``E(c, x)`` of residual EBMs (BiLSTM or
  Transformer bodies; a Hugging Face BERT/RoBERTa encoder, built from a config or pretrained).
* :class:`NoiseConditionalEnergy` — ``E(x, t)`` with one learned embedding per noise level (diffusion
  recovery likelihood).
"""

from ebms.nets._activations import ACTIVATIONS, Activation, resolve_activation
from ebms.nets._fastpaths import disabled, fast_paths
from ebms.nets._linear import linear, onednn_linear, onednn_pays, onednn_usable
from ebms.nets.acoustic import ConvBiLSTM
from ebms.nets.classifier import ConvClassifier, MLPClassifier
from ebms.nets.conv import ConvEnergy, receptive_field
from ebms.nets.gaussian import GaussianEnergy, GaussianMixtureEnergy
from ebms.nets.hf_text_energy import HFTextEnergy
from ebms.nets.mlp import MLPEnergy
from ebms.nets.noise_conditional import NoiseConditionalEnergy
from ebms.nets.pixelcnn import PixelCNN
from ebms.nets.sequence import SequenceEncoder
from ebms.nets.text_energy import TextEnergy
from ebms.nets.transducer import (
    AlignedTransducer,
    BeamSearchResult,
    PredictionNet,
    TranscriptionNet,
    transducer_beam_search,
)
from ebms.nets.two_tower import TwoTowerCloze

__all__ = [
    "ACTIVATIONS",
    "Activation",
    "AlignedTransducer",
    "BeamSearchResult",
    "ConvBiLSTM",
    "ConvEnergy",
    "GaussianEnergy",
    "GaussianMixtureEnergy",
    "HFTextEnergy",
    "MLPEnergy",
    "PredictionNet",
    "SequenceEncoder",
    "TranscriptionNet",
    "disabled",
    "fast_paths",
    "linear",
    "onednn_linear",
    "onednn_pays",
    "onednn_usable",
    "receptive_field",
    "resolve_activation",
    "transducer_beam_search",
    "PixelCNN",
    "TextEnergy",
    "TwoTowerCloze",
    "ConvClassifier",
    "MLPClassifier",
    "NoiseConditionalEnergy",
]
