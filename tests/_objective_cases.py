"""The tiny cases of the model objectives, ``objective(model, batch, generator=)``, shared by two tables.

``CASES`` maps a name (the class, then ``-variant``) to a factory of ``(objective, model, batch)``:
a small model of the kind the objective needs and a batch of 6 rows. tests/test_contracts.py runs
the generic objective contract on every case (next to the ``energy`` objectives' rows), and
tests/objectives/test_sequence_objective_contract.py runs each under the ``Trainer`` and checks the
conditional objectives' batch forms. Imported by bare name (tests/ is on the path, as for
``_discrete_checks``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ebms.distributions import NGram
from ebms.models import JEM, JRF, BernoulliRBM, ElectricCloze, FeatureCRF, ResidualLM
from ebms.models.crf_tagger import NeuralCRFTagger
from ebms.models.crf_transducer import CRFTransducer
from ebms.models.lm import LSTMLM
from ebms.models.pixelcnn import PixelCNNModel
from ebms.models.residual_text import MaskedCompletionLM, ResidualTextClassifier
from ebms.models.rnnt_aligned import AlignedRNNT
from ebms.models.seq2seq import Seq2SeqTransformer
from ebms.models.trf import TRF, DiscreteFeatures, feature_templates
from ebms.nets import MLPClassifier, NoiseConditionalEnergy, TextEnergy, TwoTowerCloze
from ebms.nets.pixelcnn import PixelCNN
from ebms.objectives import (
    EARM,
    TRFNCE,
    AugSA,
    AutoregressiveNLL,
    BeamEarlyUpdate,
    ClozePLL,
    ConditionalML,
    ConditionalNCE,
    CorpusRowsObjective,
    CrossEntropy,
    CTCObjective,
    DynamicNCE,
    ElectricNCE,
    FeatureCRFLikelihood,
    JEMObjective,
    JRFObjective,
    MonteCarloNLL,
    PixelNLL,
    RBMContrastiveDivergence,
    RecoveryLikelihood,
    ReplayBuffer,
    ResidualJointNCE,
    ResidualNCE,
    Seq2SeqNLL,
    TagBigramNoise,
    TransducerML,
)
from ebms.samplers import SGLD
from ebms.sequences import Sequences
from ebms.structured import DenominatorGraph, LabelNGram
from ebms.structured.features import AttributeVocabulary

B, T, V, C = 6, 5, 9, 3


def tagging(seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(1, V, (B, T), generator=g), torch.randint(0, C, (B, T), generator=g),
            torch.tensor([5, 2, 3, 5, 1, 4]))


def tagger() -> nn.Module:
    torch.manual_seed(0)
    return NeuralCRFTagger(V, C, embedding_dim=4, hidden=3)


class Frames(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(2, 4)

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        return self.proj(x).log_softmax(-1).transpose(0, 1), lengths


def speech() -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    targets = torch.randint(1, 4, (B, 3), generator=g)
    return (torch.randn(B, 8, 2, generator=g), torch.tensor([8, 7, 8, 6, 8, 7]), targets,
            torch.tensor([3, 2, 3, 1, 2, 3]))


def _ctc_crf() -> CTCObjective:
    return CTCObjective(DenominatorGraph.from_ngram(LabelNGram.fit([[1, 2, 3], [2, 2], [3, 1]], 4, 2)), ctc_weight=0.1)


def _feature_crf() -> tuple[nn.Module, nn.Module, tuple[Tensor, ...]]:
    """A feature CRF over 6 sentences of 2 random attributes per position (ids into 7 attributes)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 7, (B, T, 2), generator=g)
    values = torch.rand(B, T, 2, generator=g, dtype=torch.float64)
    tags, lengths = tagging()[1:]
    objective = FeatureCRFLikelihood.from_padded(ids, values, lengths, tags, n_attributes=7, l2=0.01)
    torch.manual_seed(0)
    return objective, FeatureCRF(7, C).double(), (torch.arange(B),)


def _corpus_rows() -> tuple[nn.Module, nn.Module, tuple[Tensor, ...]]:
    """Conditional NCE over the rows of an unpadded corpus of 6 sentences (2 attributes per token)."""
    g = torch.Generator().manual_seed(0)
    tags, lengths = tagging()[1:]
    seqs = [[{f"a{int(a)}": 1.0 for a in torch.randint(0, 7, (2,), generator=g)} for _ in range(int(n))]
            for n in lengths]
    vocab = AttributeVocabulary.fit(seqs)
    inner = ConditionalNCE(TagBigramNoise.fit(tags, lengths, C), nu=2)
    torch.manual_seed(0)
    return CorpusRowsObjective(vocab.encode_flat(seqs), inner), FeatureCRF(len(vocab), C).double(), (
        torch.arange(B), tags, lengths)


def _lm() -> nn.Module:
    torch.manual_seed(0)
    return LSTMLM(V, embedding_dim=4, hidden_size=3, num_layers=1)


def _rbm(*, persistent: bool) -> tuple[nn.Module, nn.Module, Tensor]:
    g = torch.Generator().manual_seed(0)
    return (RBMContrastiveDivergence(persistent=persistent), BernoulliRBM(6, 3, generator=g),
            torch.bernoulli(torch.full((B, 6), 0.3), generator=g))


def _trf_case(objective: nn.Module) -> tuple[nn.Module, nn.Module, tuple[Tensor, Tensor]]:
    """A TRF LM with bigram features over the 6 tagging sentences (ids 1..V-1, lengths 1..5)."""
    words, _, lengths = tagging()
    corpus = Sequences(words, lengths)
    feats = DiscreteFeatures.fit(corpus, V, feature_templates(("w",), order=2))
    return objective, TRF.from_corpus(feats, corpus, vocab_size=V), (words, lengths)


def _residual_joint_case() -> tuple[nn.Module, nn.Module, tuple[Tensor, ...]]:
    """A sentence classifier (scalar energy) on the tagging sentences against masked-completion noise, nu = 2."""
    words, _, lengths = tagging()
    x = Sequences(words, lengths)
    torch.manual_seed(0)
    noise = MaskedCompletionLM(V, dim=4).complete(x, n=2, generator=torch.Generator().manual_seed(1))
    model = ResidualTextClassifier(V, C, embedding_dim=4, hidden=4)
    y = torch.arange(B) % C
    return ResidualJointNCE(energy="scalar", nu=2), model, ResidualJointNCE.pack(x, y, noise)


def _residual_case() -> tuple[nn.Module, nn.Module, tuple[Tensor, ...]]:
    """A residual EBM over the LSTM LM: prefixes are the tagging sentences' first two tokens."""
    words, _, lengths = tagging()
    prefix = Sequences(words[:, :2], lengths.clamp(max=2))
    positive = Sequences(words[:, 2:], (lengths - 2).clamp(min=0))
    torch.manual_seed(0)
    model = ResidualLM(_lm(), TextEnergy(V, kind="bilstm", dim=4, layers=1), horizon=3)
    negatives = model.sample_base(prefix, 2, generator=torch.Generator().manual_seed(1))
    return ResidualNCE(nu=2), model, ResidualNCE.pack(prefix, positive, negatives)


def _electric_case() -> tuple[nn.Module, nn.Module, tuple[Tensor, Tensor]]:
    words, _, lengths = tagging()
    torch.manual_seed(0)
    model = ElectricCloze(V, dim=8, layers=1, heads=2, max_length=T, noise=TwoTowerCloze(V, dim=8, layers=1, heads=2))
    return ElectricNCE(mask_rate=0.3), model, (words, lengths)


def _cloze_case() -> tuple[nn.Module, nn.Module, tuple[Tensor, Tensor]]:
    words, _, lengths = tagging()
    torch.manual_seed(0)
    return ClozePLL(), TwoTowerCloze(V, dim=8, layers=1, heads=2), (words, lengths)


def _jem_case(objective: nn.Module) -> tuple[nn.Module, nn.Module, tuple[Tensor, Tensor]]:
    """A 3-class JEM on 4-dimensional points, half the rows unlabelled (y = -1)."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    y = torch.tensor([0, 1, 2, -1, -1, 1])
    return objective, JEM(MLPClassifier(4, C, hidden=(8,)), C), (torch.randn(B, 4, generator=g), y)


def _jrf_case() -> tuple[nn.Module, nn.Module, tuple[Tensor, Tensor, Tensor]]:
    """A JRF on the tagging sentences, the last three unlabelled (tags -1), an LSTM noise LM."""
    words, tags, lengths = tagging()
    tags = tags.clone()
    tags[3:] = -1
    torch.manual_seed(0)
    model = JRF(V, C, max_length=T, embed=4, hidden=3)
    return JRFObjective(_lm(), alpha=0.5), model, (words, tags, lengths)


def _recovery_case() -> tuple[nn.Module, nn.Module, Tensor]:
    torch.manual_seed(0)
    model = NoiseConditionalEnergy(4, 3, trunk="mlp", hidden=(8,))
    return RecoveryLikelihood([0.05, 0.1, 0.2], k=2), model, torch.randn(B, 4, generator=torch.Generator().manual_seed(0))


def _pixel_case() -> tuple[nn.Module, nn.Module, Tensor]:
    """A 2-layer PixelCNN over 3x3 binary images."""
    torch.manual_seed(0)
    images = torch.bernoulli(torch.full((B, 1, 3, 3), 0.4), generator=torch.Generator().manual_seed(0))
    return PixelNLL(), PixelCNNModel(PixelCNN(1, hidden=4, layers=2), 3, 3), images


def _seq2seq_case() -> tuple[nn.Module, nn.Module, tuple[Tensor, Tensor, Tensor, Tensor]]:
    """A one-layer translation transformer; sources are the tagging sentences, targets their tags + 1."""
    words, tags, lengths = tagging()
    torch.manual_seed(0)
    model = Seq2SeqTransformer(V, C + 1, d_model=8, heads=2, layers=1, ff=16, dropout=0.0, max_length=T + 1)
    return Seq2SeqNLL(label_smoothing=0.1, scheduled_sampling=0.5), model, (words, lengths, tags + 1, lengths - 1)


Case = Callable[[], tuple[nn.Module, nn.Module, Any]]

#: name -> () -> (objective, model, training data)
CASES: dict[str, Case] = {
    "ConditionalML": lambda: (ConditionalML(l2=0.01), tagger(), tagging()),
    "ConditionalNCE": lambda: (ConditionalNCE(TagBigramNoise.fit(tagging()[1], tagging()[2], C), nu=2),
                               tagger(), tagging()),
    "TransducerML": lambda: (TransducerML(), AlignedRNNT(V, C, embedding_dim=4, hidden=3, label_dim=2,
                                                         label_hidden=3), tagging()),
    "BeamEarlyUpdate": lambda: (BeamEarlyUpdate(2), CRFTransducer(V, C, embedding_dim=4, hidden=3, label_dim=2,
                                                                  label_hidden=3), tagging()),
    "MonteCarloNLL": lambda: (MonteCarloNLL(3), CRFTransducer(V, C, embedding_dim=4, hidden=3, label_dim=2,
                                                              label_hidden=3), tagging()),
    "CTCObjective": lambda: (CTCObjective(), Frames(), speech()),
    "CTCObjective-crf": lambda: (_ctc_crf(), Frames(), speech()),
    "FeatureCRFLikelihood": lambda: _feature_crf(),
    "CorpusRowsObjective": lambda: _corpus_rows(),
    "AutoregressiveNLL": lambda: (AutoregressiveNLL(), _lm(), (tagging()[0], tagging()[2])),
    "AutoregressiveNLL-bptt": lambda: (AutoregressiveNLL(carry_state=True), _lm(),
                                       (tagging()[0][:, :-1], tagging()[0][:, 1:])),
    "RBMContrastiveDivergence": lambda: _rbm(persistent=False),
    "RBMContrastiveDivergence-pcd": lambda: _rbm(persistent=True),
    "AugSA": lambda: _trf_case(AugSA(chains=4)),
    "TRFNCE": lambda: _trf_case(TRFNCE(NGram.fit(Sequences(tagging()[0], tagging()[2]), V, order=1), nu=2)),
    "DynamicNCE": lambda: _trf_case(DynamicNCE(_lm(), nu=1)),
    "EARM": lambda: (EARM(), _lm(), (tagging()[0], tagging()[2])),
    "EARM-active": lambda: (EARM(weight=0.5, truncate=1), _lm(), (tagging()[0], tagging()[2])),
    "ResidualNCE": lambda: _residual_case(),
    "ResidualJointNCE": lambda: _residual_joint_case(),
    "ElectricNCE": lambda: _electric_case(),
    "ClozePLL": lambda: _cloze_case(),
    "JEMObjective": lambda: _jem_case(JEMObjective(SGLD(0.5, 0.01), ReplayBuffer(32, 4), k=2, warmup_steps=3)),
    "JEMObjective-conditional": lambda: _jem_case(JEMObjective(SGLD(0.5, 0.01), ReplayBuffer(33, 4, n_classes=C),
                                                               k=2, conditional=True)),
    "CrossEntropy": lambda: _jem_case(CrossEntropy()),
    "RecoveryLikelihood": lambda: _recovery_case(),
    "JRFObjective": lambda: _jrf_case(),
    # in ebms.models until issue 25 moves them to ebms.objectives (only their imports above change)
    "PixelNLL": lambda: _pixel_case(),
    "Seq2SeqNLL": lambda: _seq2seq_case(),
}
