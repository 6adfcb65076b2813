"""Log-linear interpolation of several LMs in n-best rescoring: exact hand cases, the grid against brute
force, coordinate descent's guarantees, tie-breaking, the single-LM reductions and every bad input."""

from __future__ import annotations

import itertools

import pytest
import torch

from ebms.data.nbest import NBest
from ebms.metrics import InterpolationResult
from ebms.metrics.error_rate import error_rate
from ebms.metrics.rescoring import combined_scores, evaluate_rescoring, hypothesis_errors, simulate_nbest, tune_weights

PRON = {"to": ("T", "UW"), "two": ("T", "UW"), "too": ("T", "UW"), "the": ("DH", "AH"), "a": ("AH",),
        "cat": ("K", "AE", "T"), "cap": ("K", "AE", "P"), "cut": ("K", "AH", "T"), "sat": ("S", "AE", "T"),
        "set": ("S", "EH", "T"), "went": ("W", "EH", "N", "T"), "want": ("W", "AA", "N", "T"),
        "home": ("HH", "OW", "M"), "hum": ("HH", "AH", "M"), "we": ("W", "IY"), "he": ("HH", "IY")}
SENTS = [["the", "cat", "sat"], ["we", "went", "home", "to", "the", "cat"], ["he", "want", "two"],
         ["a", "cat", "sat", "too"], ["we", "set", "the", "cap"]]


def _f64(*v: float) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.float64)


def _complementary() -> tuple[NBest, dict[str, list[str]], torch.Tensor, torch.Tensor]:
    """One utterance, equal acoustics and lengths; the reference is h2.

    ``a`` prefers h0, ``b`` prefers h1, both rank h2 a close second: the weighted sum picks h2 iff
    ``λ_a < 9 λ_b`` and ``λ_b < 9 λ_a`` (h0: ``-10 λ_b``, h1: ``-10 λ_a``, h2: ``-(λ_a + λ_b)``).
    """
    nb = NBest.from_lists(["u"], [[["x"], ["y"], ["z"]]], acoustic=[[0.0, 0.0, 0.0]])
    return nb, {"u": ["z"]}, _f64(0.0, -10.0, -1.0), _f64(-10.0, 0.0, -1.0)


def test_interpolation_picks_the_hypothesis_neither_lm_picks_alone() -> None:
    nb, refs, a, b = _complementary()
    axis = [0.0, 0.5, 1.0, 2.0]
    for lm in (a, b):  # alone, at every weight: h0 (lambda 0, rank 1) or the LM's favourite, never h2
        single = tune_weights(nb, refs, lm, lm_weights=axis)
        assert single.grid.flatten().tolist() == [1.0] * len(axis)
    tuned = tune_weights(nb, refs, {"a": a, "b": b}, lm_weights=axis)
    assert isinstance(tuned, InterpolationResult) and tuned.search == "grid"
    # WER 0 at (0.5, 0.5), (0.5, 1), (0.5, 2), (1, 0.5), ...: the first in grid order (a outer) wins
    assert tuned.weights == {"a": 0.5, "b": 0.5} and tuned.length_penalty == 0.0
    assert (tuned.wer, tuned.errors, tuned.evaluations) == (0.0, 0, 16)
    res = evaluate_rescoring(nb, refs, {"a": a, "b": b}, lm_weight=tuned.weights, samples=10)
    assert res.chosen.tolist() == [2] and res.rescored.errors == 0 and res.lm_weights == {"a": 0.5, "b": 0.5}


def _two_minima() -> tuple[NBest, dict[str, list[str]], dict[str, torch.Tensor]]:
    """Fewest errors exactly at (λ_a, λ_b) = (1, 0) and (0, 1) on the axis {0, 1}: (0, 0) keeps the
    first pass h0, (1, 1) lets h2 (high under both LMs, poor acoustics) overtake the reference h1."""
    nb = NBest.from_lists(["u"], [[["x"], ["y"], ["z"]]], acoustic=[[0.0, -1.0, -4.0]])
    return nb, {"u": ["y"]}, {"a": _f64(0.0, 2.0, 4.0), "b": _f64(0.0, 2.0, 4.0)}


def test_grid_ties_go_to_the_first_point_with_the_first_lm_outermost() -> None:
    nb, refs, cols = _two_minima()
    for order, expected in ((("a", "b"), {"a": 0.0, "b": 1.0}), (("b", "a"), {"b": 0.0, "a": 1.0})):
        tuned = tune_weights(nb, refs, [(k, cols[k]) for k in order], lm_weights=[0.0, 1.0])
        assert tuned.weights == expected and list(tuned.weights) == list(order) and tuned.wer == 0.0
    flat = tune_weights(nb, refs, {"a": _f64(0, 0, 0), "b": _f64(0, 0, 0)}, lm_weights={"a": [2.0, 1.0], "b": [3.0, 0.0]},
                        length_penalties=[1.0, 0.0])
    assert (flat.weights, flat.length_penalty) == ({"a": 2.0, "b": 3.0}, 1.0)  # all tie: the very first point


def test_coordinate_descent_starts_from_the_first_best_single_lm_and_keeps_it_on_ties() -> None:
    nb, refs, cols = _two_minima()
    for order in (("a", "b"), ("b", "a")):
        tuned = tune_weights(nb, refs, {k: cols[k] for k in order}, lm_weights=[0.0, 1.0], max_grid=1)
        assert tuned.search == "coordinate" and tuned.start == order[0] and tuned.start_wer == 0.0
        assert tuned.weights == {order[0]: 1.0, order[1]: 0.0} and tuned.wer == 0.0
        # the start (2 LMs x 2 points) and one sweep without a move (2 blocks x 2 points)
        assert (tuned.sweeps, tuned.converged, tuned.evaluations) == (1, True, 8)


def _random_case(k: int, seed: int) -> tuple[NBest, dict[str, list[str]], dict[str, torch.Tensor]]:
    """A simulated n-best set and ``k`` informative, noisy LMs: ``-errors + 1.5 N(0, 1)`` per hypothesis."""
    nb, refs = simulate_nbest(SENTS * 3, n=6, seed=seed, pronunciations=PRON, noise=1.5)
    err = hypothesis_errors(nb, refs)[0].double()
    g = torch.Generator().manual_seed(seed)
    return nb, refs, {f"lm{i}": -err + 1.5 * torch.randn(len(nb), generator=g, dtype=torch.float64) for i in range(k)}


def _brute_wer(nb: NBest, refs: dict[str, list[str]], scores: torch.Tensor) -> float:
    """WER of the per-utterance argmax (first in rank order on ties), by plain Python."""
    s = scores.tolist()
    picked = []
    for u in range(nb.num_utterances):
        rows = [i for i in range(len(nb)) if int(nb.utterance[i]) == u]
        picked.append(list(nb.hypotheses[max(rows, key=lambda i: (s[i], -i))]))
    return error_rate([refs[u] for u in nb.utt_ids], picked).rate


def test_grid_search_matches_brute_force_over_every_point() -> None:
    nb, refs, cols = _random_case(2, seed=4)
    lams, betas = [0.0, 0.4, 1.0, 2.0], [-1.0, 0.0, 1.5]
    tuned = tune_weights(nb, refs, cols, lm_weights=lams, length_penalties=betas)
    wers = {(la, lb, be): _brute_wer(nb, refs, combined_scores(nb, cols, lm_weight={"lm0": la, "lm1": lb},
                                                               length_penalty=be))
            for la, lb, be in itertools.product(lams, lams, betas)}
    best = min(wers.values())
    first = next(p for p, w in wers.items() if w == best)  # dict order = lexicographic grid order
    assert tuned.wer == pytest.approx(best, abs=1e-12)
    assert (tuned.weights["lm0"], tuned.weights["lm1"], tuned.length_penalty) == first
    assert len(set(wers.values())) > 1 and first == (1.0, 1.0, 1.5)  # both LMs used, a word bonus


def test_coordinate_descent_never_loses_to_the_best_single_lm_and_ends_block_optimal() -> None:
    nb, refs, cols = _random_case(3, seed=6)
    lams, betas = [0.0, 0.5, 1.0, 2.0], [-1.0, 0.0, 1.0]
    err = hypothesis_errors(nb, refs)
    tuned = tune_weights(nb, refs, cols, lm_weights=lams, length_penalties=betas, max_grid=10, errors=err)
    assert tuned.search == "coordinate" and tuned.converged
    singles = {k: tune_weights(nb, refs, c, lm_weights=lams, length_penalties=betas, errors=err) for k, c in cols.items()}
    assert tuned.start_wer == min(s.wer for s in singles.values())
    assert tuned.start == next(k for k, s in singles.items() if s.wer == tuned.start_wer)
    assert tuned.wer < tuned.start_wer and tuned.sweeps == 2  # this case: it moves off the single-LM start
    assert tuned.evaluations == (1 + tuned.sweeps) * 3 * len(lams) * len(betas)
    for k in cols:  # no single block (lambda_k, beta) move improves the end point
        for lam, be in itertools.product(lams, betas):
            w = {**tuned.weights, k: lam}
            assert _brute_wer(nb, refs, combined_scores(nb, cols, lm_weight=w, length_penalty=be)) >= tuned.wer - 1e-12
    res = evaluate_rescoring(nb, refs, cols, lm_weight=tuned.weights, length_penalty=tuned.length_penalty, samples=10)
    assert res.rescored.rate == pytest.approx(tuned.wer, abs=1e-12)
    exhaustive = tune_weights(nb, refs, cols, lm_weights=lams, length_penalties=betas, errors=err)
    assert exhaustive.search == "grid" and exhaustive.wer <= tuned.wer  # the grid's is the global minimum
    assert exhaustive.wer < tuned.wer  # this case: coordinate descent stops at a block-local optimum


def test_zero_weights_reproduce_the_single_lm_results_exactly() -> None:
    nb, refs, cols = _random_case(2, seed=6)
    a = cols["lm0"]
    for lam, be in ((0.7, -0.5), (1.3, 2.0)):
        single = combined_scores(nb, a, lm_weight=lam, length_penalty=be)
        assert torch.equal(combined_scores(nb, cols, lm_weight={"lm0": lam, "lm1": 0.0}, length_penalty=be), single)
        assert torch.equal(combined_scores(nb, {"lm0": a}, lm_weight={"lm0": lam}, length_penalty=be), single)
    lams, betas = [0.0, 0.3, 1.0, 2.5], [-1.0, 0.0, 0.7]
    one = tune_weights(nb, refs, a, lm_weights=lams, length_penalties=betas)
    both = tune_weights(nb, refs, cols, lm_weights={"lm0": lams, "lm1": [0.0]}, length_penalties=betas)
    alone = tune_weights(nb, refs, [("lm0", a)], lm_weights=lams, length_penalties=betas)
    for t in (both, alone):
        assert (t.weights["lm0"], t.length_penalty, t.wer) == (one.lm_weight, one.length_penalty, one.wer)
    gen = torch.Generator
    r1 = evaluate_rescoring(nb, refs, a, lm_weight=1.3, length_penalty=0.7, samples=50, generator=gen().manual_seed(0))
    r2 = evaluate_rescoring(nb, refs, cols, lm_weight={"lm0": 1.3, "lm1": 0.0}, length_penalty=0.7, samples=50,
                            generator=gen().manual_seed(0))
    assert torch.equal(r1.chosen, r2.chosen) and r1.rescored_interval == r2.rescored_interval
    assert r2.lm_weight == 1.0 and r1.lm_weights is None
    s1, s2 = r1.summary(), r2.summary()
    assert "lm_weight" not in s2 and (s2["lm_weight_lm0"], s2["lm_weight_lm1"]) == (1.3, 0.0)
    assert {k: v for k, v in s1.items() if k != "lm_weight"} == {k: v for k, v in s2.items() if not k.startswith("lm_")}


def test_interpolation_result_summary_is_plain_json() -> None:
    import json

    nb, refs, cols = _two_minima()
    s = tune_weights(nb, refs, cols, lm_weights=[0.0, 1.0], max_grid=1).summary()
    assert json.loads(json.dumps(s)) == s
    assert s["weights"] == {"a": 1.0, "b": 0.0} and s["search"] == "coordinate" and s["dev_wer"] == 0.0


def test_bad_named_lms_and_weights_raise_messages_naming_the_argument() -> None:
    nb, refs, cols = _random_case(2, seed=7)
    n = len(nb)
    a = cols["lm0"]
    w = {"lm0": 1.0, "lm1": 1.0}
    with pytest.raises(ValueError, match=rf"lm\['lm1'\]: expected shape \({n},\) \(one per hypothesis\); got \({n - 1},\)"):
        combined_scores(nb, {"lm0": a, "lm1": a[:-1]}, lm_weight=w)
    bad = a.clone()
    bad[2] = float("nan")
    with pytest.raises(ValueError, match=r"lm\['lm1'\]: expected finite scores; got a non-finite one at hypothesis 2"):
        tune_weights(nb, refs, {"lm0": a, "lm1": bad}, lm_weights=[1.0])
    with pytest.raises(TypeError, match=r"lm\['lm1'\]: expected a floating-point tensor"):
        combined_scores(nb, {"lm0": a, "lm1": [0.0] * n}, lm_weight=w)
    with pytest.raises(ValueError, match=r"lm_weight: unknown LM name\(s\) \['kn5'\]; expected the names of lm: "
                                         r"\['lm0', 'lm1'\]"):
        combined_scores(nb, cols, lm_weight={**w, "kn5": 0.5})
    with pytest.raises(ValueError, match=r"lm_weight: no weight for the LM\(s\) \['lm1'\] \(weight 0.0 leaves an LM out\)"):
        evaluate_rescoring(nb, refs, cols, lm_weight={"lm0": 1.0}, samples=10)
    with pytest.raises(TypeError, match=r"lm_weight: expected a mapping \{name: weight\} for the LMs \['lm0', 'lm1'\]; "
                                        r"got float 1.0"):
        combined_scores(nb, cols, lm_weight=1.0)
    with pytest.raises(ValueError, match=r"lm_weight\['lm0'\]: expected a finite number; got inf"):
        combined_scores(nb, cols, lm_weight={"lm0": float("inf"), "lm1": 0.0})
    with pytest.raises(ValueError, match=r"lm_weights: unknown LM name\(s\) \['x'\]"):
        tune_weights(nb, refs, cols, lm_weights={"lm0": [1.0], "lm1": [1.0], "x": [1.0]})
    with pytest.raises(ValueError, match=r"lm_weights\['lm1'\]: expected at least one value; got 0"):
        tune_weights(nb, refs, cols, lm_weights={"lm0": [1.0], "lm1": []})
    with pytest.raises(ValueError, match=r"lm_weights: expected a finite number; got nan"):
        tune_weights(nb, refs, cols, lm_weights=[1.0, float("nan")])
    with pytest.raises(TypeError, match="lm_weights: a mapping of per-LM axes needs named LM columns"):
        tune_weights(nb, refs, a, lm_weights={"lm0": [1.0]})
    with pytest.raises(ValueError, match="length_penalties: expected at least one value; got 0"):
        tune_weights(nb, refs, cols, lm_weights=[1.0], length_penalties=[])
    with pytest.raises(ValueError, match="max_grid: expected an int >= 1; got 0"):
        tune_weights(nb, refs, cols, lm_weights=[1.0], max_grid=0)
    with pytest.raises(ValueError, match="max_sweeps: expected an int >= 1; got 0"):
        tune_weights(nb, refs, cols, lm_weights=[1.0], max_sweeps=0)
    with pytest.raises(ValueError, match="lm: expected at least one named LM score tensor; got none"):
        combined_scores(nb, {}, lm_weight={})
    with pytest.raises(ValueError, match="lm: expected distinct names; got 'lm0' twice"):
        combined_scores(nb, [("lm0", a), ("lm0", a)], lm_weight=w)
    with pytest.raises(ValueError, match="lm: expected non-empty str names; got 3 at position 0"):
        combined_scores(nb, {3: a}, lm_weight=w)  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"lm: expected a tensor, a mapping \{name: \(N,\) scores\} or a sequence of "
                                        r"\(name, scores\) pairs; got Tensor at position 0"):
        combined_scores(nb, [a, a], lm_weight=w)  # type: ignore[list-item]
