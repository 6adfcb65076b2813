"""``benchmarks/residual_text.py --quick`` runs and ends with its JSON line (slow), and the records of the
residual and E-ARM benchmarks (residual_text, residual_addition, earm_compare) hold the paired comparisons
the documentation quotes (fast: synthetic per-seed figures, no training).

The quick mode trains a base LM, a residual energy and evaluates the perplexity interval; on 2
busy cores that takes about half a minute per corpus, so the test is marked slow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _benchmarks import bench

from ebms.data.paths import data_root

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_residual_text_quick_mode_ends_with_a_summary_whose_bounds_are_ordered() -> None:
    if not (data_root() / "tinyshakespeare" / "input.txt").is_file():
        pytest.skip("Tiny Shakespeare is not under the data root ($EBMS_DATA)")
    out = subprocess.run([sys.executable, "residual_text.py", "--quick", "--corpus", "shakespeare", "--no-save",
                          "--baselines"],
                         cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600, check=True)
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "residual_text"
    s = summary["shakespeare"]
    assert s["joint_lower"] <= s["joint_upper"]  # lower <= upper holds for every draw (Jensen)
    assert set(s["gaps"]) == {"n10", "n100"} and all(g >= 0 for g in s["gaps"].values())
    assert s["base_ppl"] > 1.0
    assert "RALM PPL" in out.stdout and "BALM PPL" in out.stdout  # the baselines' rows


@pytest.mark.slow
@pytest.mark.bench  # about 1.5 min; the quick-mode test above runs the same script in CI
def test_residual_text_reads_finished_seeds_and_cached_bases_back(tmp_path: Path) -> None:
    if not (data_root() / "tinyshakespeare" / "input.txt").is_file():
        pytest.skip("Tiny Shakespeare is not under the data root ($EBMS_DATA)")
    argv = [sys.executable, "residual_text.py", "--quick", "--corpus", "shakespeare", "--no-save",
            "--base-cache", str(tmp_path / "bases"), "--out", str(tmp_path / "seeds")]
    first = subprocess.run(argv, cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600, check=True)
    assert (tmp_path / "seeds" / "shakespeare-seed0.json").is_file()
    assert len(list((tmp_path / "bases").glob("base-shakespeare-*-seed0.pt"))) == 1
    again = subprocess.run(argv, cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600, check=True)
    assert "shakespeare seed 0: read back from" in again.stderr
    strip = (lambda out: {k: v for k, v in json.loads(out.strip().splitlines()[-1]).items()
                          if k not in ("wall_s", "peak_rss_mb")})
    assert strip(again.stdout) == strip(first.stdout)
    other = subprocess.run([*argv, "--cache", "4"], cwd=ROOT / "benchmarks", capture_output=True, text=True,
                           timeout=600, check=True)
    assert "read back" not in other.stderr  # other settings: trained again


_bench = bench


def test_residual_text_record_compares_the_joint_upper_bound_with_the_base_paired_by_seed(tmp_path: Path) -> None:
    rt = _bench("residual_text")
    from _record import MAX_BYTES, Recorder

    ns = [10, 100, 1000]
    recs = []
    for seed, (base, upper) in enumerate([(6.50, 6.45), (6.60, 6.56), (6.40, 6.37)]):
        r = {"seed": seed, "base_ppl": base, "tokens": 1600, "heldout_nce_accuracy": 0.55}
        for n in ns:
            r[f"n{n}"] = {"lower": upper - 1.0 / n, "upper": upper, "gap": 1.0 / n, "ess_median": 0.8 * n,
                          "seconds": 1.0}
        recs.append(r)
    fig = rt.record_figures(recs, ns, {"base_ppl": 6.5})
    cmp = fig["comparisons"]["joint_upper_vs_base_ppl"]
    assert cmp["diffs"] == pytest.approx([-0.05, -0.04, -0.03])  # joint upper minus base, per seed
    assert cmp["higher_is_better"] is False and cmp["words"] == "joint model (upper bound) better"
    assert fig["spread"]["base_ppl"]["mean"] == pytest.approx(6.5)
    path = Recorder("residual_text_test", seeds=[0, 1, 2], argv=["benchmarks/residual_text.py"]).write(
        fig, directory=tmp_path)
    assert path is not None and path.stat().st_size < MAX_BYTES
    assert json.loads(path.read_text())["figures"]["comparisons"]["joint_upper_vs_base_ppl"]["seeds"] == [0, 1, 2]


def test_lstm_sizes_and_the_horizon_law_perplexity_are_exact() -> None:
    import math

    import torch

    from ebms.models.lm import LSTMLM
    from ebms.sequences import Sequences

    rt = _bench("residual_text")
    for V, h in ((100, 8), (10000, 32)):
        assert rt.lstm_params(V, h) == rt.n_params(LSTMLM(V, embedding_dim=h, hidden_size=h, num_layers=1))
    assert rt.n_params(rt.lstm_of_size(10000, rt.lstm_params(10000, 164) + 50)) == rt.lstm_params(10000, 164)
    torch.manual_seed(0)
    lm = LSTMLM(7, embedding_dim=4, hidden_size=5, num_layers=1).double().eval()
    c = Sequences.from_lists([[1, 2], [3], [4, 4, 4]])
    x = Sequences.from_lists([[5, 6], [1, 2, 3], []])
    horizon = 3  # rows 0 and 2 are shorter than the horizon and end with </s>; row 1 is cut there
    with torch.no_grad():
        want, tokens = 0.0, 0
        for i in range(3):
            ci, xi = c[torch.tensor([i])], x[torch.tensor([i])]
            end = int(xi.lengths[0]) < horizon
            want += float(lm.continuation_log_prob(ci, xi, end=end)[0])
            tokens += int(xi.lengths[0]) + end
    got = rt.horizon_ppl(lm, c, x, horizon, batch_size=2)
    assert got == pytest.approx(math.exp(-want / tokens), rel=1e-12)


def test_residual_text_record_compares_the_joint_model_with_ralm_and_balm() -> None:
    rt = _bench("residual_text")
    ns = [10]
    recs = [{"seed": s, "base_ppl": 300.0 + s, "tokens": 600, "heldout_nce_accuracy": 0.6,
             "n10": {"lower": 280.0 + s, "upper": 290.0 + s, "gap": 10.0, "ess_median": 5.0, "seconds": 1.0},
             "ralm": {"ppl": 295.0 + s}, "balm": {"ppl": 280.0 + 2 * s}} for s in range(3)]
    fig = rt.record_figures(recs, ns, {})
    c = fig["comparisons"]
    assert c["joint_upper_vs_ralm_ppl"]["diffs"] == pytest.approx([-5.0, -5.0, -5.0])
    assert c["joint_upper_vs_ralm_ppl"]["words"] == "joint model (upper bound) better"
    assert c["joint_upper_vs_balm_ppl"]["diffs"] == pytest.approx([10.0, 9.0, 8.0])
    assert c["ralm_vs_base_ppl"]["words"] == "RALM better" and fig["spread"]["balm_ppl"]["mean"] == pytest.approx(282)


def test_residual_addition_record_compares_joint_and_base_paired_by_seed() -> None:
    ra = _bench("residual_addition")
    recs = [{"seed": s, "base_sample_acc": 0.60 + 0.01 * s, "joint_n100_acc": 0.70 + 0.01 * s,
             "joint_n1_top3_acc": 0.80, "joint_n100_top3_acc": 0.80 + 0.02 * (s - 1), "base_ppl": 1.15,
             "joint_ppl_exact": 1.11 + 0.001 * s, "joint_ppl_n10": [1.10, 1.12], "joint_ppl_n100": [1.10, 1.12],
             "joint_ppl_n1000": [1.10, 1.12]} for s in range(3)]
    fig = ra.record_figures(recs, [1, 10, 100], [10, 100, 1000])
    c = fig["comparisons"]
    assert c["acc_joint_n100_vs_base_draw"]["words"] == "joint model better"  # +0.10 on every seed
    assert c["acc_joint_n100_top3_vs_base_top3_draw"]["words"] == "not significant"  # -0.02, 0, +0.02
    assert c["ppl_joint_exact_vs_base_exact"]["words"] == "joint model better"  # lower perplexity
    assert fig["spread"]["joint_ppl_n1000_upper"]["mean"] == pytest.approx(1.12)


def test_earm_compare_record_pairs_earm_with_cross_entropy_and_skips_empty_buckets() -> None:
    ec = _bench("earm_compare")
    recs = [{"seed": s, "ce_bleu_beam5": 50.0 + s, "earm_bleu_beam5": 48.0 + s, "ce_bleu_greedy": 40.0,
             "earm_bleu_greedy": 40.0 + (s - 1), "ce_bleu_beam5_len0-10": 60.0, "earm_bleu_beam5_len0-10": 59.0 + s,
             "ce_bleu_beam5_len10-20": 55.0, "earm_bleu_beam5_len10-20": 54.0 + s,
             "ce_bleu_beam5_len20-inf": None, "earm_bleu_beam5_len20-inf": None, "ce_test_nll_per_token": 1.0,
             "earm_test_nll_per_token": 1.1 + 0.01 * s, "earm_step_cost_ratio": 4.0, "exposure_bias_ratio": 0.5,
             "ce_total_s": 1.0, "earm_total_s": 2.0, "seed_wall_s": 3.0} for s in range(3)]
    fig = ec.record_figures({"mt": {"steps": 10, "earm_start_step": 8, "wall_s": 9.0, "seeds": recs}})["mt"]
    c = fig["comparisons"]
    assert "bleu_beam5_len20-inf" not in c  # an empty bucket has no comparison
    assert c["bleu_beam5"]["diffs"] == [-2.0, -2.0, -2.0] and c["bleu_beam5"]["words"] == "E-ARM worse"
    assert c["bleu_greedy"]["words"] == "not significant"
    assert c["test_nll_per_token"]["words"] == "E-ARM worse"  # higher NLL, lower is better
    assert fig["spread"]["earm_step_cost_ratio"]["mean"] == pytest.approx(4.0)


def test_masked_lm_pretraining_trains_the_energys_own_encoder_on_its_own_inputs() -> None:
    pytest.importorskip("transformers")
    import torch

    from ebms.sequences import Sequences

    rt = _bench("residual_text")

    class Tiny:  # what pretrained_hf_energy reads of a Corpus: the sizes and training pairs
        name, V, p, K = "tiny", 9, 3, 2

        def train_pairs(self, n: int, g: torch.Generator) -> tuple[Sequences, Sequences]:
            start = torch.randint(1, 5, (n, 1), generator=g)
            rows = (start + torch.arange(self.p + self.K)) % (self.V - 1) + 1  # a deterministic successor rule
            return Sequences(rows[:, : self.p]), Sequences(rows[:, self.p:])

    fresh, info0 = rt.pretrained_hf_energy(Tiny(), "bert", 0, seed=0)
    trained, info = rt.pretrained_hf_energy(Tiny(), "bert", 60, seed=0)
    assert info0 == {"pretrain_steps": 0.0} and info["pretrain_steps"] == 60.0
    assert 0.0 <= info["pretrain_mlm_accuracy"] <= 1.0 and info["pretrain_mlm_loss"] > 0.0
    same = [torch.equal(a, b) for a, b in zip(fresh.encoder.parameters(), trained.encoder.parameters())]
    assert not all(same)  # the same seed's fresh encoder, moved by pretraining
    assert torch.equal(trained.head.weight, torch.zeros_like(trained.head.weight))


def test_oracle_scores_average_the_judges_token_log_probs_over_each_continuation_and_its_end() -> None:
    import torch

    from ebms.distributions import BackoffNGram
    from ebms.sequences import Sequences

    rt = _bench("residual_text")
    oracle = BackoffNGram.fit([[1, 2, 3, 4], [2, 3, 3], [4, 1, 2]], 5, order=3, smoothing="witten_bell")
    c = Sequences.from_lists([[1, 2], [3]])
    x = Sequences.from_lists([[3, 4], [2]])
    horizon = 2  # row 0 fills the horizon (no </s>); row 1 ends early, so its </s> counts
    got = rt.oracle_scores(oracle, c, x, horizon)
    full0 = oracle.token_log_probs(Sequences.from_lists([[1, 2, 3, 4]]))[0]
    full1 = oracle.token_log_probs(Sequences.from_lists([[3, 2]]))[0]
    want = torch.tensor([float(full0[2] + full0[3]) / 2, float(full1[1] + full1[2]) / 2], dtype=torch.float64)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)


def test_generation_summary_pools_the_preference_items_into_one_exact_binomial_test() -> None:
    from ebms.metrics.generation import binomial_upper_tail

    rt = _bench("residual_text")

    def gen(wins: int, losses: int, n: int) -> dict:
        who = {"unique_1gram": 0.9, "oracle_logp_per_token": -5.0, "mean_length": 5.0,
               "oracle_logp_gap": {"gap": -0.5, "stderr": 0.1}}
        return {"preference_joint_over_base": {"wins": wins, "losses": losses, "ties": n - wins - losses, "n": n},
                "base": dict(who), "joint": dict(who), "truth": {k: who[k] for k in ("unique_1gram", "mean_length")}}

    s = rt.generation_summary([gen(6, 3, 10), gen(7, 2, 10)])
    pooled = s["preference_pooled"]
    assert (pooled["wins"], pooled["losses"], pooled["ties"], pooled["n"]) == (13, 5, 2, 20)
    assert pooled["p_value"] == binomial_upper_tail(13, 20) and pooled["p_value_base_better"] == binomial_upper_tail(5, 20)
    assert s["joint"]["oracle_logp_gap"] == -0.5 and s["truth"] == {"unique_1gram": 0.9, "mean_length": 5.0}
