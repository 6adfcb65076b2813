"""Export round-trips: each exported program, saved and loaded, gives the model's own outputs; ONNX Runtime
gives them within float32 rounding (where onnxscript and onnxruntime are installed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from ebms.apply.export import SentenceLogProb, ViterbiDecoder, export_energy, export_lm, export_viterbi, to_onnx
from ebms.models.crf_tagger import NeuralCRFTagger
from ebms.models.lm import LSTMLM, TransformerLM
from ebms.nets import MLPEnergy
from ebms.nets.conv import ConvEnergy
from ebms.sequences import Sequences
from ebms.structured import CRF, LinearChainCRF, bio_allowed_transitions

HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime"))


def _roundtrip(program, tmp_path: Path):
    path = tmp_path / "model.pt2"
    torch.export.save(program, path)
    return torch.export.load(path).module()


def _onnx(program, tmp_path: Path, *inputs: torch.Tensor) -> list:
    import onnxruntime as ort

    path = to_onnx(program, tmp_path / "model.onnx")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, {n: x.numpy() for n, x in zip(names, inputs)})


ENERGIES = {
    "mlp": (lambda: MLPEnergy(3, hidden=(16, 16)), (3,)),
    "conv": (lambda: ConvEnergy(1, 28), (1, 28, 28)),
}


@pytest.mark.parametrize("name", list(ENERGIES))
def test_an_exported_energy_is_the_energy_at_every_batch_size(name: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    make, event = ENERGIES[name]
    energy = make().eval()
    program = export_energy(energy, torch.randn(2, *event))
    loaded = _roundtrip(program, tmp_path)
    for b in (1, 2, 7):
        x = torch.randn(b, *event)
        assert torch.equal(loaded(x), energy(x))


def test_export_refuses_a_module_in_training_mode_and_a_one_row_example() -> None:
    energy = MLPEnergy(2, hidden=(4,))
    with pytest.raises(ValueError, match="training mode"):
        export_energy(energy, torch.randn(2, 2))
    with pytest.raises(ValueError, match="B >= 2"):
        export_energy(energy.eval(), torch.randn(1, 2))


LMS = {
    "lstm": lambda: LSTMLM(30, embedding_dim=8, hidden_size=16, num_layers=2),
    "transformer": lambda: TransformerLM(30, d_model=16, num_heads=2, num_layers=2, dim_feedforward=32, max_length=16),
}


@pytest.mark.parametrize("name", list(LMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_an_exported_lm_gives_the_log_prob_of_each_sentence(name: str, dtype: torch.dtype, tmp_path: Path) -> None:
    torch.manual_seed(0)
    lm = LMS[name]().to(dtype).eval()
    T = 9
    program = export_lm(lm, T)
    loaded = _roundtrip(program, tmp_path)
    tokens = torch.randint(1, 30, (6, T))
    lengths = torch.tensor([9, 0, 1, 4, 8, 2])  # an empty sentence scores log p(</s>)
    want = lm.log_prob(Sequences(tokens.masked_fill(torch.arange(T) >= lengths[:, None], 0), lengths))
    assert torch.allclose(SentenceLogProb(lm)(tokens, lengths), want, rtol=1e-6 if dtype == torch.float32 else 1e-12)
    got = loaded(tokens, lengths)
    assert got.dtype == dtype and torch.allclose(got, want, rtol=1e-6 if dtype == torch.float32 else 1e-12)
    assert torch.allclose(loaded(tokens[:1], lengths[:1]), want[:1], rtol=1e-5)


def test_export_lm_checks_the_length_against_the_model() -> None:
    lm = LMS["transformer"]().eval()
    with pytest.raises(ValueError, match="max_length=16"):
        export_lm(lm, 16)
    with pytest.raises(TypeError, match="AutoregressiveLM"):
        SentenceLogProb(torch.nn.Linear(2, 2))  # type: ignore[arg-type]


def test_an_exported_crf_layer_decodes_as_the_crf(tmp_path: Path) -> None:
    torch.manual_seed(0)
    crf = CRF(5, batch_first=True).eval()
    program = export_viterbi(crf, 7)
    loaded = _roundtrip(program, tmp_path)
    em = torch.randn(4, 7, 5)
    lengths = torch.tensor([7, 1, 3, 6])
    tags, scores = loaded(em, lengths)
    ref = crf.decode(em, lengths=lengths)
    assert [row[:n].tolist() for row, n in zip(tags, lengths.tolist())] == ref
    assert bool((tags[1, 1:] == -1).all())
    dist = crf.distribution(em, lengths=lengths)
    assert torch.allclose(scores, dist.max_score)


def test_a_taggers_decoder_applies_its_bio_masks_as_its_own_decode() -> None:
    torch.manual_seed(0)
    names = ["O", "B-NP", "I-NP", "B-VP", "I-VP"]
    allowed, allowed_start = bio_allowed_transitions(names)
    tagger = NeuralCRFTagger(20, 5, embedding_dim=4, hidden=4, allowed=allowed, allowed_start=allowed_start).eval()
    with torch.no_grad():
        tagger.transitions.normal_()
        tagger.proj.weight.normal_()
    words, lengths = torch.randint(1, 20, (6, 8)), torch.tensor([8, 1, 5, 8, 2, 7])
    em = tagger.emissions(words, lengths)
    tags, _ = export_viterbi(tagger, 8).module()(em, lengths)
    assert torch.equal(tags, tagger.decode(words, lengths))
    free, _ = ViterbiDecoder(tagger, constrained=False)(em, lengths)
    assert torch.equal(free, LinearChainCRF(em, tagger.transitions, lengths, start=tagger.start,
                                            end=tagger.end).argmax)


@pytest.mark.skipif(HAS_ONNX, reason="onnx and onnxscript are installed")
def test_to_onnx_without_the_packages_says_how_to_install_them(tmp_path: Path) -> None:
    program = export_energy(MLPEnergy(2, hidden=(4,)).eval(), torch.randn(2, 2))
    with pytest.raises(ImportError, match=r"pip install 'ebms\[export\]'"):
        to_onnx(program, tmp_path / "m.onnx")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_ONNX, reason="onnx, onnxscript and onnxruntime are needed")
def test_onnx_files_give_the_models_outputs(tmp_path: Path) -> None:
    """Each kind written by to_onnx and run by ONNX Runtime (slow set: the ONNX conversion takes seconds each)."""
    torch.manual_seed(0)
    for name, (make, event) in ENERGIES.items():
        energy = make().eval()
        x = torch.randn(5, *event)
        (out,) = _onnx(export_energy(energy, torch.randn(2, *event)), tmp_path, x)
        assert torch.allclose(torch.from_numpy(out), energy(x).detach(), rtol=1e-4, atol=1e-4), name
    for name, make_lm in LMS.items():
        lm = make_lm().eval()
        tokens, lengths = torch.randint(1, 30, (4, 9)), torch.tensor([9, 0, 1, 4])
        (out,) = _onnx(export_lm(lm, 9), tmp_path, tokens, lengths)
        want = SentenceLogProb(lm)(tokens, lengths).detach()
        assert torch.allclose(torch.from_numpy(out), want, rtol=1e-4, atol=1e-4), name
    crf = CRF(5, batch_first=True).eval()
    em, lengths = torch.randn(4, 7, 5), torch.tensor([7, 1, 3, 6])
    tags, scores = ViterbiDecoder(crf)(em, lengths)
    out_tags, out_scores = _onnx(export_viterbi(crf, 7), tmp_path, em, lengths)
    assert torch.equal(torch.from_numpy(out_tags), tags)
    assert torch.allclose(torch.from_numpy(out_scores), scores.detach(), atol=1e-5)
