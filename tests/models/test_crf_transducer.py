"""Tests for ebms.models.crf_transducer: beam search and the early-update loss against enumeration."""

from __future__ import annotations

import itertools

import pytest
import torch

from ebms.models.crf_transducer import CRFTransducer
from ebms.objectives import BeamEarlyUpdate
from ebms.objectives._base import LossOutput

K, T, V = 3, 4, 12


def _model(potentials: str = "raw", seed: int = 0, **kw: object) -> CRFTransducer:
    torch.manual_seed(seed)
    m = CRFTransducer(V, K, potentials=potentials, embedding_dim=5, hidden=4, label_dim=3, label_hidden=5, **kw)
    return m.double().eval()


def _batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V, (3, T), generator=g), torch.tensor([4, 2, 3])


def _enumerate(m: CRFTransducer, words: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All K^L tag sequences of one sentence (padded to T with tag 0) and their scores u(y, x)."""
    seqs = torch.tensor(list(itertools.product(range(K), repeat=length)))
    n = seqs.shape[0]
    tags = torch.zeros(n, words.shape[1], dtype=torch.long)
    tags[:, :length] = seqs
    with torch.no_grad():
        s = m.score(words.expand(n, -1), torch.full((n,), length), tags)
    return tags, s


@pytest.mark.parametrize("potentials", ["raw", "log_softmax"])
def test_crf_transducer_full_beam_finds_the_exhaustive_argmax(potentials):
    m = _model(potentials)
    words, lengths = _batch()
    with torch.no_grad():
        tags, scores = m.beam_search(words, lengths, beam=K**T)
    for b in range(3):
        length = int(lengths[b])
        all_tags, s = _enumerate(m, words[b : b + 1], length)
        best = int(s.argmax())
        assert torch.equal(tags[b, :length], all_tags[best, :length])
        assert (tags[b, length:] == -1).all()
        assert scores[b].item() == pytest.approx(s[best].item(), abs=1e-10)


@pytest.mark.parametrize("potentials", ["raw", "log_softmax"])
def test_early_update_loss_with_full_beam_is_exact_negative_log_likelihood(potentials):
    m = _model(potentials)
    words, lengths = _batch()
    gold = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 0], [1, 0, 2, 0]])
    out = BeamEarlyUpdate(K**T).compute(m, words, lengths, gold)
    assert isinstance(out, LossOutput)
    nll = []
    for b in range(3):
        _, s = _enumerate(m, words[b : b + 1], int(lengths[b]))
        g = m.score(words[b : b + 1], lengths[b : b + 1], gold[b : b + 1])[0]
        nll.append(torch.logsumexp(s, 0) - g)
    assert out.loss.item() == pytest.approx(torch.stack(nll).mean().item(), abs=1e-10)
    assert out.metrics["early"] == 0.0 and out.metrics["prefix"] == 1.0


def test_early_update_loss_uses_beam_and_oracle_prefix_when_oracle_falls_out():
    m = _model()
    words, lengths = _batch()
    beam = 2
    # the worst sequence of sentence 0 is certainly pruned at some step with a beam of 2
    all_tags, s = _enumerate(m, words[:1], 4)
    worst = all_tags[int(s.argmin())].unsqueeze(0)
    out = BeamEarlyUpdate(beam).compute(m, words[:1], lengths[:1], worst)
    assert out.metrics["early"] == 1.0
    # recompute by hand: walk the beam step by step
    prefixes = [()]
    expected = None
    for j in range(4):
        cands = [p + (k,) for p in prefixes for k in range(K)]
        padded = torch.zeros(len(cands), T, dtype=torch.long)
        padded[:, : j + 1] = torch.tensor(cands)
        with torch.no_grad():  # u(y_{1:j+1}): F still reads the whole sentence
            u = m.local_scores(words[:1].expand(len(cands), -1), torch.full((len(cands),), 4), padded)
            u = u[:, : j + 1].sum(1)
        top = u.topk(beam).indices.tolist()
        prefixes = [cands[i] for i in top]
        oracle = tuple(worst[0, : j + 1].tolist())
        if oracle not in prefixes:
            u_or = u[cands.index(oracle)]
            expected = torch.logsumexp(torch.cat([u[top], u_or.view(1)]), 0) - u_or
            assert out.metrics["prefix"] == pytest.approx((j + 1) / 4)
            break
    assert expected is not None
    assert out.loss.item() == pytest.approx(expected.item(), abs=1e-10)


def test_early_update_loss_is_differentiable_and_gradients_reach_both_networks():
    m = _model()
    m.train()
    words, lengths = _batch()
    out = BeamEarlyUpdate(2).compute(m, words, lengths, torch.zeros(3, T, dtype=torch.long))
    out.loss.backward()
    for net in (m.transcription, m.prediction):
        grads = [p.grad for p in net.parameters()]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
        assert any(g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("beam", [2, K**T])
def test_early_update_loss_gradient_matches_finite_differences(beam):
    m = _model("log_softmax")
    words, lengths = _batch()
    gold = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 0], [1, 0, 2, 0]])
    params = [m.transcription.out.bias, m.prediction.out.weight]
    out = BeamEarlyUpdate(beam).compute(m, words, lengths, gold)
    assert out.metrics["early"] == (1.0 if beam == 2 else 0.0)  # both branches of the loss are covered
    grads = torch.autograd.grad(out.loss, params)
    eps = 1e-6
    for p, g in zip(params, grads):
        flat, gflat = p.data.view(-1), g.view(-1)
        for i in range(min(4, flat.numel())):
            old = flat[i].item()
            with torch.no_grad():
                flat[i] = old + eps
                up = BeamEarlyUpdate(beam).compute(m, words, lengths, gold).loss
                flat[i] = old - eps
                down = BeamEarlyUpdate(beam).compute(m, words, lengths, gold).loss
                flat[i] = old
            # central difference: error O(eps^2) + rounding O(1e-16 / eps)
            assert gflat[i].item() == pytest.approx(((up - down) / (2 * eps)).item(), abs=1e-7)


def test_crf_transducer_teacher_forced_score_equals_incremental_scoring():
    m = _model("log_softmax")
    words, lengths = _batch()
    tags = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 0], [1, 0, 2, 0]])
    with torch.no_grad():
        f = m.transcription(words, lengths)
        state = m.prediction.initial_state(3)
        prev = torch.full((3,), K)
        total = torch.zeros(3, dtype=torch.float64)
        for i in range(T):
            g, state = m.prediction.step(prev, state)
            loc = m.local(f[:, i], g, prev).gather(1, tags[:, i : i + 1]).squeeze(1)
            total += torch.where(i < lengths, loc, torch.zeros(()))
            prev = tags[:, i]
        assert torch.allclose(m.score(words, lengths, tags), total, atol=1e-12)


def test_crf_transducer_padding_does_not_change_scores_or_decoding():
    m = _model()
    words, lengths = _batch()
    tags = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 0], [1, 0, 2, 0]])
    pad_w = torch.cat([words, torch.randint(1, V, (3, 3))], 1)
    pad_t = torch.cat([tags, torch.full((3, 3), 2)], 1)
    pad_t[1, 2:] = -1  # anything beyond a length is ignored
    with torch.no_grad():
        assert torch.allclose(m.score(words, lengths, tags), m.score(pad_w, lengths, pad_t), atol=1e-12)
        a, sa = m.beam_search(words, lengths, beam=5)
        b, sb = m.beam_search(pad_w, lengths, beam=5)
    assert torch.equal(a, b[:, :T]) and (b[:, T:] == -1).all()
    assert torch.allclose(sa, sb, atol=1e-12)


def test_allowed_mask_keeps_beam_search_inside_the_allowed_set_and_rejects_forbidden_gold():
    allowed = torch.ones(K, K, dtype=torch.bool)
    allowed[:, 1] = False
    allowed[0, 1] = True  # tag 1 may only follow tag 0
    start = torch.tensor([True, False, True])
    m = _model(allowed=allowed, allowed_start=start)
    words, lengths = _batch()
    with torch.no_grad():
        tags, _ = m.beam_search(words, lengths, beam=K**T)
    for b in range(3):
        y = tags[b, : int(lengths[b])].tolist()
        assert start[y[0]] and all(allowed[p, q] for p, q in zip(y, y[1:]))
    bad = torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    assert torch.isneginf(m.score(words, lengths, bad)[0])
    with pytest.raises(ValueError, match=r"tags: sequences \[0\]"):
        BeamEarlyUpdate(2).compute(m, words, lengths, bad)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"tags": torch.full((3, T), K)}, r"tags: expected values in \[0, 2\]"),
        ({"tags": torch.zeros(3, T + 1, dtype=torch.long)}, r"tags: expected shape \(3, 4\)"),
        ({"tags": torch.zeros(3, T)}, r"tags: expected an integer tensor"),
        ({"lengths": torch.tensor([5, 2, 3])}, r"lengths: expected values in \[1, 4\]"),
        ({"lengths": torch.tensor([4, 2])}, r"lengths: expected a \(3,\) integer tensor"),
        ({"words": torch.zeros(0, T, dtype=torch.long), "lengths": torch.zeros(0, dtype=torch.long),
          "tags": torch.zeros(0, T, dtype=torch.long)}, r"words: expected a non-empty batch"),
        ({"words": torch.zeros(3, T)}, r"words: expected a \(B, T\) long tensor"),
    ],
)
def test_crf_transducer_bad_inputs_name_the_argument(change, match):
    m = _model()
    words, lengths = _batch()
    args = {"words": words, "lengths": lengths, "tags": torch.zeros(3, T, dtype=torch.long)}
    args.update(change)
    with pytest.raises((ValueError, TypeError), match=match):
        m.score(args["words"], args["lengths"], args["tags"])
    with pytest.raises((ValueError, TypeError), match=match):
        BeamEarlyUpdate(2).compute(m, args["words"], args["lengths"], args["tags"])


def test_crf_transducer_bad_options_name_the_argument():
    with pytest.raises(ValueError, match="potentials: expected one of raw, log_softmax; got 'softmax'"):
        CRFTransducer(V, K, potentials="softmax")
    with pytest.raises(ValueError, match=r"allowed: expected a bool tensor of shape \(3, 3\); got shape \(3, 2\)"):
        CRFTransducer(V, K, allowed=torch.ones(3, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"allowed_start: expected a bool tensor of shape \(3,\); got dtype"):
        CRFTransducer(V, K, allowed_start=torch.ones(3))
    words, lengths = _batch()
    with pytest.raises(ValueError, match="beam: expected an int >= 1; got 0"):
        _model().beam_search(words, lengths, beam=0)


@pytest.mark.parametrize("potentials", ["raw", "log_softmax"])
@pytest.mark.parametrize("beam", [2, K**T])
def test_early_update_loss_is_never_negative_at_large_float32_potentials(potentials, beam):
    # With the decoded argmax as gold and potentials x1000 in float32, the oracle survives and the
    # exact loss is ~0; it was computed as logsumexp(beam) - gold with the oracle's incremental
    # beam score inside the sum and its teacher-forced score outside, which differ by rounding
    # (1e-4 here), so 7 of 40 such batches came out negative. A beam-restricted NLL is >= 0.
    for seed in range(6):
        m = _model(potentials, seed=seed).float()
        with torch.no_grad():
            for layer in (m.transcription.out, m.prediction.out):  # f and g, hence the potentials, x1000
                layer.weight.mul_(1000.0), layer.bias.mul_(1000.0)
        words, lengths = _batch(seed)
        with torch.no_grad():
            gold, _ = m.beam_search(words, lengths, beam=K**T)
        for b in range(3):
            out = BeamEarlyUpdate(beam).compute(m, words[b : b + 1], lengths[b : b + 1], gold[b : b + 1].clamp_min(0))
            assert out.loss.item() >= 0.0
        if beam == K**T:  # equals the exact NLL of the float64 model by enumeration, to float32 rounding
            m64 = m.double()
            out = BeamEarlyUpdate(beam).compute(m64, words, lengths, gold.clamp_min(0))
            nll = []
            for b in range(3):
                _, s = _enumerate(m64, words[b : b + 1], int(lengths[b]))
                g = m64.score(words[b : b + 1], lengths[b : b + 1], gold[b : b + 1].clamp_min(0))[0]
                nll.append(torch.logsumexp(s, 0) - g)
            assert out.loss.item() == pytest.approx(torch.stack(nll).mean().item(), abs=1e-9)


@pytest.mark.parametrize("potentials", ["raw", "log_softmax"])
def test_calling_the_model_decodes_by_beam_search_as_the_taggers_do(potentials):
    """``model(words, lengths).argmax`` (the taggers' decoding call, ``ebms.metrics.tagger_eval``) is the
    beam search's best hypothesis: the exhaustive argmax with a full beam, ``-1`` beyond each length."""
    m = _model(potentials)
    words, lengths = _batch()
    out = m(words, lengths, beam=K**T)
    assert torch.equal(out.argmax, out.tags) and torch.equal(out.argmax, m.beam_search(words, lengths, beam=K**T)[0])
    for i, n in enumerate(lengths.tolist()):
        tags, s = _enumerate(m, words[i : i + 1], n)
        assert out.argmax[i, :n].tolist() == tags[int(s.argmax()), :n].tolist()
        assert (out.argmax[i, n:] == -1).all()
    narrow = m(words, lengths, beam=1).argmax  # greedy: a valid sequence, not necessarily the best
    assert narrow.shape == (3, T) and bool((narrow[lengths[:, None] > torch.arange(T)] >= 0).all())


def test_calling_the_model_accepts_the_inputs_then_lengths_order_with_characters():
    torch.manual_seed(0)
    m = CRFTransducer(V, K, embedding_dim=5, hidden=4, char_vocab_size=7, char_dim=3).double().eval()
    assert m.transcription.encoder.char_embed.embedding_dim == 3
    words, lengths = _batch()
    chars = torch.randint(1, 7, (3, T, 5), generator=torch.Generator().manual_seed(2))
    a, b = m(words, lengths, chars, beam=4), m(words, chars, lengths, beam=4)
    assert torch.equal(a.argmax, b.argmax) and torch.equal(a.scores, b.scores)
