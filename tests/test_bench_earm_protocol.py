"""benchmarks/earm_protocol.py: the checkpoint a report selects, and an E-ARM arm that starts exactly where its
cross-entropy run was at the branch epoch."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import earm_protocol  # noqa: E402

from ebms.train.checkpoint import CheckpointStore  # noqa: E402


def test_select_takes_the_lowest_validation_nll_after_the_branch_earliest_on_ties():
    curve = {10: 1.0, 20: 3.0, 30: 2.0, 40: 2.0, 50: 2.5}
    assert earm_protocol.select(curve, after=10) == 30  # step 10 is before the branch; 30 and 40 tie
    assert earm_protocol.select(curve, after=0) == 10
    with pytest.raises(SystemExit, match="no validation figure after step 50"):
        earm_protocol.select(curve, after=50)


def test_valid_curve_reads_the_eval_events_of_the_log(tmp_path):
    lines = [{"step": 5, "loss": 1.0}, {"event": "eval", "step": 10, "values": {"valid_nll": 2.5}},
             {"event": "resume", "step": 10}, {"event": "eval", "step": 20, "values": {"valid_nll": 2.25}}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert earm_protocol.valid_curve(tmp_path) == {10: 2.5, 20: 2.25}


def test_arm_names_say_start_weight_and_clip():
    assert earm_protocol.arm_name(15, 1.0, 0.5) == "earm-e15-w1-c0.5"
    assert earm_protocol.arm_name(5, 0.25, None) == "earm-e5-w0.25-cnone"
    assert earm_protocol.arm_name(15, 1.0, 0.3, grad_clip=None) == "earm-e15-w1-c0.3-gnone"
    assert earm_protocol.ce_name() == "ce" and earm_protocol.ce_name(None) == "ce-gnone"
    assert earm_protocol.ce_name(5.0) == "ce-g5"
    assert earm_protocol.arm_name(15, 1.0, 1.0, separate=True) == "earm-e15-w1-c1-sep"
    assert earm_protocol.ce_name(schedule="isqrt") == "ce-isqrt"
    assert earm_protocol.ce_name(None, "isqrt") == "ce-isqrt-gnone"
    assert earm_protocol.arm_name(15, 1.0, 1.0, separate=True, schedule="isqrt") == "earm-e15-w1-c1-isqrt-sep"


def test_isqrt_warms_up_linearly_then_decays_as_one_over_sqrt_t():
    assert earm_protocol.lr_multiplier("constant", 125) is None
    f = earm_protocol.lr_multiplier("isqrt", 10)
    warm = earm_protocol.WARMUP_EPOCHS * 10
    assert f(warm // 2) == pytest.approx(0.5) and f(warm) == 1.0
    assert f(4 * warm) == pytest.approx(0.5) and f(0) == pytest.approx(1 / warm)


def test_separate_refuses_an_unclipped_ce_term():
    with pytest.raises(SystemExit, match=r"^--separate: clips the CE term at --grad-clip; got --grad-clip none"):
        earm_protocol.main(["earm", "--task", "mt", "--quick", "--separate", "--grad-clip", "none"])


def test_sweep_arms_parse_as_start_epoch_and_weight_scale():
    assert earm_protocol.parse_arm("15:3") == (15, 3.0, earm_protocol.DEFAULT_CLIP)
    assert earm_protocol.parse_arm("5:0.3:2") == (5, 0.3, 2.0) and earm_protocol.parse_arm("5:1:none") == (5, 1.0, None)
    for bad in ("15", "a:1", "15:1:2:3", "15:0", "15:-1", "15:nan", "15:1:0", "15:1:x"):
        with pytest.raises(argparse.ArgumentTypeError):
            earm_protocol.parse_arm(bad)


@pytest.mark.parametrize(("extra", "message"), [
    ([], r"^--arms: sweep needs the arms to tabulate"),
    (["--arms", "9:1"], r"^--arms: start epochs must lie in \[1, 3\]; got 9:1"),
    (["--arms", "2:1", "3:2:0.5"], r"^--arms: no arm has runs for seeds \[0\] under .*missing: earm-e2-w1-cnone, "
                                   r"earm-e3-w2-c0.5\); train them with `earm` first"),
])
def test_sweep_refuses_arms_it_cannot_tabulate(tmp_path, extra, message):
    with pytest.raises(SystemExit, match=message):
        earm_protocol.main(["sweep", "--task", "mt", "--quick", "--seeds", "0", "--runs-dir", str(tmp_path), *extra])


@pytest.mark.parametrize(("extra", "message"), [
    (["--task", "lm", "--pairs", "1000"], r"^--pairs: sets the training pairs of the mt task; got --task lm"),
    (["--task", "mt", "--pairs", "31"], r"^--pairs: expected 32 to 100000 training pairs .*; got 31"),
    (["--task", "mt", "--pairs", "200000"], r"^--pairs: expected 32 to 100000 training pairs .*; got 200000"),
    (["--task", "mt", "--lines", "1000"], r"^--lines: sets the training lines of the lm task; got --task mt"),
    (["--task", "lm", "--lines", "31"], r"^--lines: expected 32 to 29242 training lines .*; got 31"),
    (["--task", "lm", "--lines", "30000"], r"^--lines: expected 32 to 29242 training lines .*; got 30000"),
    (["--task", "mt", "--dropout", "0.3"], r"^--dropout: sets the dropout of the lm task's LSTM; got --task mt"),
    (["--task", "lm", "--dropout", "0"], r"^--dropout: expected a probability in \(0, 1\); got 0$"),
    (["--task", "lm", "--dropout", "1"], r"^--dropout: expected a probability in \(0, 1\); got 1$"),
])
def test_pairs_and_lines_are_refused_where_they_cannot_apply(tmp_path, extra, message):
    with pytest.raises(SystemExit, match=message):
        earm_protocol.main(["report", "--quick", "--seeds", "0", "--runs-dir", str(tmp_path), *extra])


def test_the_mt_ceiling_is_the_true_model_bleu_100_and_its_exact_nll_on_canonical_references():
    import math

    from ebms.data.toy_translation import NOUNS, toy_translation
    test = toy_translation(60, generator=torch.Generator().manual_seed(3))  # synonym_prob 0: canonical targets
    c = earm_protocol.mt_ceiling(test)
    assert c["bleu"] == pytest.approx(100.0) and all(c[f"bleu_len{lo}-{hi or 'inf'}"] == pytest.approx(100.0)
                                                     for lo, hi in earm_protocol.MT_BUCKETS)
    stems = tuple(row[2] for row in NOUNS)
    nouns = sum(w.startswith(stems) for t in test.target_vocab.decode(test.target) for w in t)
    tokens = int((test.target.lengths + 1).sum())  # every target keeps each noun with probability 1 - 0.2
    assert c["nll_per_token"] == pytest.approx(-nouns * math.log(1 - earm_protocol.SYNONYM_PROB) / tokens)


@pytest.mark.slow
@pytest.mark.bench  # about 1.5 min on two idle cores; the pure helpers it relies on are tested above
def test_an_earm_arm_branches_from_the_ce_checkpoint_of_its_start_epoch(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    args = ["--task", "mt", "--seeds", "0", "--quick", "--runs-dir", str(tmp_path), "--clip", "0.5"]
    assert earm_protocol.main(["ce", *args]) == 0
    assert earm_protocol.main(["earm", *args]) == 0
    seed = tmp_path / "earm-protocol-quick" / "mt" / "seed0"
    ce, arm = seed / "ce", seed / "earm-e2-w1-c0.5"
    branch = 2 * 10  # start epoch 2 of 10 batches (320 examples, batch 32)
    log = [json.loads(x) for x in (arm / "metrics.jsonl").read_text().splitlines()]
    resume = [x for x in log if x.get("event") == "resume"]
    assert len(resume) == 1 and resume[0]["step"] == branch and resume[0]["checkpoint"].startswith(str(ce))
    shared = (ce / "metrics.jsonl").read_text().splitlines()
    assert [json.dumps(x) for x in log[:log.index(resume[0])]] == [json.dumps(json.loads(x)) for x in shared[:len(
        log[:log.index(resume[0])])]]  # the arm's log begins with the CE run's history up to the branch
    trained = [x for x in log if "metrics" in x and x["step"] > branch]
    assert trained and all(x["metrics"]["active"] == 1.0 and x["metrics"]["earm_grad_norm"] > 0 for x in trained)
    assert all(x["metrics"]["active"] == 0.0 for x in log if "metrics" in x and x["step"] <= branch)
    ce_end = CheckpointStore(ce / "checkpoints").load(40).tensors
    arm_end = CheckpointStore(arm / "checkpoints").load(40).tensors
    assert not all(torch.equal(ce_end[k], arm_end[k]) for k in ce_end if k.startswith("model/"))
    # the command again: both runs are complete, nothing is trained or rewritten
    before = (arm / "metrics.jsonl").read_text()
    assert earm_protocol.main(["earm", *args]) == 0 and (arm / "metrics.jsonl").read_text() == before
    # sweep: the arm against the CE run, read after its branch; an arm without runs is listed, not fatal
    default = earm_protocol.DEFAULT_CLIP
    fig = earm_protocol.sweep(earm_protocol.task_mt(True), seed.parent, [0], [(2, 1.0, default), (2, 1.0, 0.1)], 0.5,
                              1.0, False, "constant")
    assert fig["missing"] == ["earm-e2-w1-c0.1"] and list(fig["arms"]) == ["earm-e2-w1-c0.5"]
    a = fig["arms"]["earm-e2-w1-c0.5"]
    assert a["start_epoch"] == 2 and a["clip"] == 0.5 and a["per_seed"]["seed0"]["earm_best_step"] > branch
    assert not [k for k in a["per_seed"]["seed0"] if k.endswith("_valid_curve")]  # kept out of a sweep's record
    logged = [x["metrics"]["earm_grad_norm"] for x in trained]
    norms = a["surrogate_grad_norm"]["seed0"]
    assert norms["logged_steps"] == len(logged) and norms["max"] == max(logged) and norms["min"] == min(logged)
    assert norms["clip_binding_share"] == sum(n > 0.5 for n in logged) / len(logged)
    assert a["comparisons"]["bleu_beam5"]["diffs"] == [a["per_seed"]["seed0"]["earm_bleu_beam5"]
                                                       - a["per_seed"]["seed0"]["ce_bleu_beam5"]]
    # report: also against CE at its best epoch overall (the branch epoch and those before it included)
    rep = earm_protocol.report(earm_protocol.task_mt(True), seed.parent, [0], "earm-e2-w1-c0.5", 2)
    r, curve = rep["per_seed"]["seed0"], earm_protocol.valid_curve(ce)
    assert r["ce_overall_best_step"] == min(curve, key=lambda s: (curve[s], s))
    assert r["ce_overall_best_valid_nll"] <= r["ce_best_valid_nll"]
    strict = rep["comparisons"]["bleu_beam5, CE at its best epoch overall"]
    assert strict["values_b"] == [r["ce_overall_bleu_beam5"]] and strict["values_a"] == [r["earm_bleu_beam5"]]
    if r["ce_overall_best_step"] == r["ce_best_step"]:
        assert r["ce_overall_bleu_beam5"] == r["ce_bleu_beam5"]
    # --separate: the CE term keeps the clip of 1 inside the objective, the trainer's total clip is off
    assert earm_protocol.main(["earm", *args, "--separate"]) == 0
    sep = [json.loads(x) for x in (seed / "earm-e2-w1-c0.5-sep" / "metrics.jsonl").read_text().splitlines()]
    after = [x for x in sep if "metrics" in x and x["step"] > branch]
    assert after and all(x["metrics"]["ce_grad_norm"] > 0 for x in after)


def test_dropout_reaches_the_lstm_and_acts_in_training_mode_only():
    spec = earm_protocol.task_lm(True, dropout=0.3)
    lm = spec.build()
    assert lm.dropout == 0.3 and earm_protocol.task_lm(True).build().dropout == 0.0
    x = spec.data[0][:4]
    lm.train()
    torch.manual_seed(0)
    a = lm(x)[0]
    torch.manual_seed(1)
    assert not torch.equal(a, lm(x)[0])  # two dropout masks
    lm.eval()
    assert torch.equal(lm(x)[0], lm(x)[0])


def test_lines_trains_on_the_first_lines_with_the_full_vocabulary_and_test_set():
    full, part = earm_protocol.task_lm(False), earm_protocol.task_lm(False, 1000)
    assert part.data[0].shape[0] == 1000 and part.steps_per_epoch == 1000 // earm_protocol.BATCH
    assert torch.equal(part.data[0], full.data[0][:1000, :part.data[0].shape[1]])
    assert torch.equal(part.data[1], full.data[1][:1000])
