"""NegativeCache: base-LM draws per prefix, saved atomically as safetensors, drawn uniformly in the
n-per-prefix layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from scipy.stats import chi2

from ebms.data.negative_cache import NegativeCache
from ebms.distributions import NGram
from ebms.errors import DataError
from ebms.models import LSTMLM
from ebms.models.residual_lm import NGramContinuations, ResidualLM, enumerate_continuations
from ebms.sequences import Sequences

V, K = 4, 2


def ngram(seed: int = 0) -> NGram:
    g = torch.Generator().manual_seed(seed)
    return NGram(V, 2, torch.randn(V, V, generator=g, dtype=torch.float64).log_softmax(-1))


def labelled_cache(P: int = 3, S: int = 8) -> NegativeCache:
    """Sample j of prefix p is the continuation [p + 1, j + 1]: every draw says where it came from."""
    prefixes = Sequences.from_lists([[p + 1] for p in range(P)])
    samples = Sequences.from_lists([[p + 1, j + 1] for p in range(P) for j in range(S)])
    return NegativeCache(prefixes, samples, S, horizon=None, settings={"note": "by hand"})


def test_save_and_load_round_trip_everything(tmp_path: Path):
    g = torch.Generator().manual_seed(0)
    prefixes = Sequences.from_lists([[1, 2], [3], [], [2, 2, 2]])
    cache = NegativeCache.build(NGramContinuations(ngram()), prefixes, 5, horizon=K, generator=g, top_k=2)
    path = cache.save(tmp_path / "neg.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["neg.safetensors"]  # no temporary file left
    back = NegativeCache.load(path)
    assert back.prefixes.equal(prefixes) and back.samples.equal(cache.samples)
    assert (len(back), back.samples_per_prefix, back.horizon) == (4, 5, K)
    assert back.settings == {"top_k": 2, "top_p": None, "temperature": 1.0}
    hand = labelled_cache()
    again = NegativeCache.load(hand.save(tmp_path / "neg.safetensors"))  # overwrite in place
    assert again.horizon is None and again.settings == {"note": "by hand"} and again.samples.equal(hand.samples)
    rows = Sequences.from_lists([[1], [2], [3]])  # prefixes and samples viewing one storage still save
    shared = NegativeCache.load(NegativeCache(rows[:1], rows[1:], 2, horizon=1).save(tmp_path / "shared.safetensors"))
    assert shared.samples.tolist() == [[2], [3]]


def test_draw_returns_nu_samples_of_each_requested_prefix_in_order():
    cache = labelled_cache()
    index = torch.tensor([2, 0, 2, 1])
    out = cache.draw(index, 3, torch.Generator().manual_seed(0))
    assert out.batch_size == 12
    for b, p in enumerate(index.tolist()):
        for row in out[b * 3:(b + 1) * 3].tolist():  # rows b nu .. b nu + nu - 1
            assert row[0] == p + 1 and 1 <= row[1] <= 8


def test_draw_is_uniform_over_the_stored_samples():
    cache = labelled_cache(P=2, S=8)
    n = 8000
    out = cache.draw(torch.ones(n // 4, dtype=torch.long), 4, torch.Generator().manual_seed(1))
    assert set(out.tokens[:, 0].tolist()) == {2}
    counts = torch.bincount(out.tokens[:, 1] - 1, minlength=8).double()
    stat = float(((counts - n / 8) ** 2 / (n / 8)).sum())
    assert stat < chi2.ppf(1 - 1e-3, 7)  # chi-square, 7 degrees of freedom, p = 1e-3


def test_build_draws_follow_the_base_horizon_law():
    prefixes = Sequences.from_lists([[1, 3], []])
    S = 3000
    base = ngram(2)
    cache = NegativeCache.build(NGramContinuations(base), prefixes, S, horizon=K,
                                generator=torch.Generator().manual_seed(4), batch_size=2500)
    xs = enumerate_continuations(V, K)
    key = {tuple(x): i for i, x in enumerate(xs.tolist())}
    law = ResidualLM(base, torch.nn.Identity(), horizon=K)
    for p in range(2):
        counts = torch.zeros(xs.batch_size, dtype=torch.float64)
        for x in cache.samples[p * S:(p + 1) * S].tolist():
            counts[key[tuple(x)]] += 1
        rep = Sequences(prefixes[p].tokens.expand(xs.batch_size, -1), prefixes[p].lengths.expand(xs.batch_size))
        prob = law.base_log_prob(rep, xs).exp()
        stat = float(((counts - S * prob) ** 2 / (S * prob)).sum())
        assert stat < chi2.ppf(1 - 1e-3, xs.batch_size - 1)  # p = 1e-3 per prefix


def test_build_with_a_neural_lm_batches_whole_prefixes_and_shows_progress(capsys):
    torch.manual_seed(0)
    lm = LSTMLM(V, embedding_dim=4, hidden_size=4, num_layers=1).eval()
    prefixes = Sequences.from_lists([[1], [2, 3], [3], [], [1, 1]])
    cache = NegativeCache.build(lm, prefixes, 3, horizon=4, generator=torch.Generator().manual_seed(0),
                                batch_size=2, progress=True)  # one prefix (3 draws) per call
    assert cache.samples.batch_size == 15 and int(cache.samples.lengths.max()) <= 4
    assert "negatives" in capsys.readouterr().err
    unbounded = NegativeCache.build(lm, prefixes, 2, horizon=None, generator=torch.Generator().manual_seed(0))
    assert unbounded.horizon is None and unbounded.samples.batch_size == 10


def test_a_neural_lm_encodes_each_prefix_once_with_the_same_draws_as_copies():
    # AutoregressiveLM declares per_prefix_sampling: the cache asks for S draws per prefix in one call,
    # which must equal drawing from S explicit copies of each prefix with the same generator
    torch.manual_seed(0)
    lm = LSTMLM(V, embedding_dim=4, hidden_size=4, num_layers=1).eval()
    assert LSTMLM.per_prefix_sampling is True
    prefixes = Sequences.from_lists([[1], [2, 3], [], [1, 1]])
    cache = NegativeCache.build(lm, prefixes, 3, horizon=3, generator=torch.Generator().manual_seed(4))
    rep = Sequences(prefixes.tokens.repeat_interleave(3, 0), prefixes.lengths.repeat_interleave(3))
    copies = lm.sample(12, torch.Generator().manual_seed(4), prefix=rep, max_length=3, truncate=True)
    assert cache.samples.equal(copies) and torch.equal(cache.samples.lengths, copies.lengths)


def test_errors_name_the_argument(tmp_path: Path):
    cache = labelled_cache()
    with pytest.raises(ValueError, match="^nu: "):
        cache.draw(torch.tensor([0]), 0)
    with pytest.raises(ValueError, match=r"^index: expected prefix indices in \[0, 2\]; got min 0, max 3"):
        cache.draw(torch.tensor([0, 3]), 1)
    with pytest.raises(ValueError, match=r"^index: expected a 1-D tensor \(B,\); got shape \(1, 1\)"):
        cache.draw(torch.tensor([[0]]), 1)
    with pytest.raises(TypeError, match="^index: expected a 1-D integer tensor"):
        cache.draw(torch.tensor([0.0]), 1)
    with pytest.raises(ValueError, match=r"^samples: expected 3 prefixes x 2 = 6 rows; got 24"):
        NegativeCache(cache.prefixes, cache.samples, 2, horizon=None)
    with pytest.raises(ValueError, match="^samples: expected at most horizon=1 tokens; got one of 2"):
        NegativeCache(cache.prefixes, cache.samples, 8, horizon=1)
    lm = LSTMLM(V, embedding_dim=4, hidden_size=4, num_layers=1)
    with pytest.raises(ValueError, match=r"^lm: is in training mode .* call lm.eval\(\) first"):
        NegativeCache.build(lm, cache.prefixes, 2, horizon=2, generator=None)
    with pytest.raises(TypeError, match="^lm: expected a language model with sample"):
        NegativeCache.build(object(), cache.prefixes, 2, horizon=2, generator=None)
    with pytest.raises(TypeError, match="^samples: expected an ebms.sequences.Sequences; got list"):
        NegativeCache(cache.prefixes, [[1]], 1, horizon=None)
    with pytest.raises(TypeError, match="^prefixes: expected an ebms.sequences.Sequences; got list"):
        NegativeCache.build(NGramContinuations(ngram()), [[1]], 2, horizon=2, generator=None)
    bad = tmp_path / "bad.safetensors"
    tensors = {"prefix_tokens": torch.ones(1, 1, dtype=torch.long), "prefix_lengths": torch.ones(1, dtype=torch.long),
               "sample_tokens": torch.ones(1, 1, dtype=torch.long), "sample_lengths": torch.ones(1, dtype=torch.long)}
    save_file(tensors, str(bad), metadata={"ebms.negative_cache": "{}"})
    with pytest.raises(DataError, match="is not a valid negative cache .*samples_per_prefix"):
        NegativeCache.load(bad)
    text = tmp_path / "notes.safetensors"
    text.write_text("hello, not tensors")
    with pytest.raises(DataError, match="is not a negative cache"):
        NegativeCache.load(text)
    other = tmp_path / "weights.safetensors"
    save_file({"w": torch.zeros(2)}, str(other))
    with pytest.raises(DataError, match="is not a negative cache .*'ebms.negative_cache' metadata"):
        NegativeCache.load(other)
    with pytest.raises(FileNotFoundError, match="^path: no negative cache at"):
        NegativeCache.load(tmp_path / "missing.safetensors")
