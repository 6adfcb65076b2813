"""End-to-end: text generation with energies on the command line (``ebms.cli.generation``).

The packaged recipes ``addition-base``, ``residual-addition`` and ``earm-addition`` run on 1-digit
sums with small overrides. ``eval``'s exact perplexities equal the library's enumeration on the
loaded run, ``sample`` marks each sum right or wrong as integer arithmetic says, the residual run
leaves its base untouched, a resumed residual run equals an uninterrupted one, and E-ARM switches
on at ``generation.earm_start``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from ebms.cli.main import main
from ebms.cli.run import load_run
from ebms.models.residual_lm import ResidualLM, enumerate_continuations, exact_joint_log_probs

SMALL = ["run.progress=false", "generation.digits=1", "generation.n_train=60", "data.n_test=30", "generation.dim=16",
         "generation.heads=2", "train.batch_size=16", "train.log_every=10", "train.checkpoint_every=20"]
#: the base LMs' feed-forward / LSTM width (a residual run reads no generation.hidden)
BASE = ["generation.hidden=32"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``addition-base`` (60 steps) and ``residual-addition`` on it (40 steps) in one folder."""
    root = tmp_path_factory.mktemp("generation")
    assert main(["train", "addition-base", f"run.out_dir={root}", *SMALL, *BASE, "train.steps=60"]) == 0
    assert main(["train", "residual-addition", f"run.out_dir={root}", f"generation.base_run={root}/addition-base",
                 *SMALL, "train.steps=40", "generation.negatives=4", "generation.joint_samples=20"]) == 0
    return root


def _eval(run: Path) -> dict:
    return json.loads((run / "eval.json").read_text())


def test_eval_perplexities_equal_the_enumerated_laws_of_the_loaded_runs(runs: Path) -> None:
    cfg, model, data, step = load_run(runs / "residual-addition")
    assert isinstance(model, ResidualLM) and step == 40
    prefix, truth = data.task.split(data.test)
    K = data.task.continuation_length
    table = enumerate_continuations(model.vocab_size, K)
    index = [int((table.tokens == t).all(1).nonzero()) for t in truth.tokens]  # each true sum's row
    with torch.no_grad():
        joint = exact_joint_log_probs(model, prefix)[torch.arange(truth.batch_size), index]
        base = model.base.continuation_token_log_probs(prefix, truth)[:, :K].double().sum(1)
    tokens = truth.batch_size * K
    got = _eval(runs / "residual-addition")["figures"]
    assert got["joint_ppl_exact"] == pytest.approx(math.exp(-float(joint.sum()) / tokens), rel=1e-9)
    assert got["base_ppl"] == pytest.approx(math.exp(-float(base.sum()) / tokens), rel=1e-6)
    assert _eval(runs / "addition-base")["figures"]["base_ppl"] == pytest.approx(got["base_ppl"], rel=1e-9)
    # the [lower, upper] estimate from 20 base draws: ordered, and about the exact value (1 %)
    assert got["joint_ppl_lower"] <= got["joint_ppl_upper"]
    assert 0.99 * got["joint_ppl_lower"] <= got["joint_ppl_exact"] <= 1.01 * got["joint_ppl_upper"]
    for key in ("base_correct", "joint_correct"):
        assert 0.0 <= got[key] <= 1.0


def test_eval_prints_both_figures_and_sample_marks_sums_by_integer_arithmetic(
        runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["eval", str(runs / "residual-addition")]) == 0
    out = capsys.readouterr().out
    assert "correct test sums, step 40: base LM " in out and "joint model " in out and "(exact)" in out
    for run in ("addition-base", "residual-addition"):
        assert main(["sample", str(runs / run), "--n", "12", "--seed", "5"]) == 0
        lines = capsys.readouterr().out.splitlines()[:-1]
        assert len(lines) == 12
        for line in lines:
            text, verdict = line.split("  ")
            a, b, s = text[0], text[2], text[4:]  # 1-digit operands: "a+b=" then what the model wrote
            assert text[1] + text[3] == "+="
            right = len(s) == 2 and s.isdigit() and int(a) + int(b) == int(s)
            assert verdict == ("right" if right else "wrong"), line


def test_the_residual_run_keeps_its_base_frozen(runs: Path) -> None:
    _, base, _, _ = load_run(runs / "addition-base")
    _, model, _, _ = load_run(runs / "residual-addition")
    for name, value in base.state_dict().items():
        assert torch.equal(model.base.state_dict()[name], value), name


def test_a_resumed_residual_run_equals_an_uninterrupted_one(runs: Path, tmp_path: Path) -> None:
    common = ["residual-addition", f"run.out_dir={tmp_path}", f"generation.base_run={runs}/addition-base", *SMALL,
              "generation.negatives=4", "generation.joint_samples=20", "--no-eval"]
    assert main(["train", *common, "train.steps=20"]) == 0
    assert main(["train", *common, "train.steps=40", "--resume"]) == 0
    _, resumed, _, _ = load_run(tmp_path / "residual-addition")
    _, whole, _, _ = load_run(runs / "residual-addition")
    for name, value in whole.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], value), name


def test_earm_switches_on_at_its_start_step(tmp_path: Path) -> None:
    assert main(["train", "earm-addition", f"run.out_dir={tmp_path}", *SMALL, *BASE, "train.steps=40",
                 "generation.earm_start=20", "train.log_every=1", "--no-eval"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "earm-addition" / "metrics.jsonl").read_text().splitlines()]
    active = {r["step"]: r["metrics"]["active"] for r in rows if "active" in r.get("metrics", {})}
    assert active and len(active) == 40 and all(v == (1.0 if s > 20 else 0.0) for s, v in active.items()), active


# -- residual EBMs, E-ARM and Electric on a corpus (model.kind of ebms.cli.language) ------------------
WORDS = ("the", "cat", "dog", "sat", "ran", "on", "a", "mat")
#: the LSTM base (and E-ARM run) of the text runs: the sizes of its [lm] section
LM_16 = ["lm.embedding_dim=16", "lm.layers=1", "lm.hidden=16"]


@pytest.fixture(scope="module")
def text_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Tiny text files, an LSTM base run ``base`` and a residual run ``res`` on it."""
    import random

    root = tmp_path_factory.mktemp("text")
    r = random.Random(0)
    for split, n in (("train", 300), ("test", 40)):
        (root / f"{split}.txt").write_text("".join(" ".join(r.choice(WORDS) for _ in range(r.randint(2, 8))) + "\n"
                                                   for _ in range(n)))
    common = ["data.name=text", f"language.train_path={root}/train.txt", f"language.test_path={root}/test.txt",
              f"run.out_dir={root}/runs", "run.progress=false", "train.batch_size=16"]
    assert main(["train", *common, "model.kind=lstm", *LM_16, "train.steps=150", "run.name=base"]) == 0
    assert main(["train", *common, "model.kind=residual", "objective.kind=nce", f"residual.base_run={root}/runs/base",
                 "residual.embedding_dim=16", "residual.layers=1",
                 "residual.prefix_length=2", "residual.horizon=3", "residual.negatives=4", "residual.joint_samples=30",
                 "train.steps=60", "run.name=res"]) == 0
    return root, common


def test_text_residual_eval_gives_the_base_perplexity_of_the_continuations_exactly(text_runs) -> None:
    from ebms.data.text import continuation_pairs

    root, _ = text_runs
    _, base, data, _ = load_run(root / "runs" / "base")
    prefix, cont = continuation_pairs(data.held_out["test"], 2, 3)
    with torch.no_grad():
        steps = base.continuation_token_log_probs(prefix, cont).double()  # (B, 4): 3 tokens, then </s>
    total, tokens = 0.0, 0
    for b, length in enumerate(cont.lengths.tolist()):  # the horizon law: </s> only where the sentence ended
        total += float(steps[b, :length].sum()) + (float(steps[b, length]) if length < 3 else 0.0)
        tokens += length + (length < 3)
    got = _eval(root / "runs" / "res")["figures"]["test"]
    assert got["tokens"] == tokens and got["pairs"] == prefix.batch_size
    assert got["base"] == pytest.approx(math.exp(-total / tokens), rel=1e-6)
    assert got["lower"] <= got["upper"]


def test_text_residual_samples_continue_held_out_prefixes(text_runs, capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = text_runs
    test = [line.split() for line in (root / "test.txt").read_text().splitlines()]
    starts = {tuple(words[:2]) for words in test if len(words) > 2}
    capsys.readouterr()
    assert main(["sample", str(root / "runs" / "res"), "--n", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()[:-1]
    assert len(lines) == 8
    for line in lines:
        words = line.split()
        assert tuple(words[:2]) in starts and 2 <= len(words) <= 5, line


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_a_residual_run_with_a_hugging_face_energy_trains_resumes_and_evaluates(text_runs, kind, tmp_path) -> None:
    pytest.importorskip("transformers")
    from ebms.nets.hf_text_energy import HFTextEnergy

    root, common = text_runs
    args = ["train", *common, f"run.out_dir={tmp_path}", "model.kind=residual", "objective.kind=nce",
            f"residual.base_run={root}/runs/base", f"residual.energy={kind}", "residual.embedding_dim=16",
            "residual.layers=1", "residual.heads=2", "residual.prefix_length=2", "residual.horizon=3",
            "residual.negatives=4", "residual.joint_samples=10", "train.checkpoint_every=5", "run.name=hf"]
    assert main([*args, "train.steps=5"]) == 0
    assert main([*args, "train.steps=10", "--resume"]) == 0
    _, model, _, step = load_run(tmp_path / "hf")
    assert step == 10 and isinstance(model.energy_net, HFTextEnergy)
    assert model.energy_net.max_length == 5 and float(model.energy_net.head.weight.detach().abs().sum()) > 0  # it trained
    got = _eval(tmp_path / "hf")["figures"]["test"]
    assert got["lower"] <= got["upper"]


def test_text_earm_and_electric_train_and_report(text_runs, capsys: pytest.CaptureFixture[str]) -> None:
    root, common = text_runs
    assert main(["train", *common, "model.kind=lstm", *LM_16, "objective.kind=earm", "lm.earm_start=10",
                 "train.steps=20", "train.log_every=1", "run.name=earm"]) == 0
    rows = [json.loads(line) for line in (root / "runs" / "earm" / "metrics.jsonl").read_text().splitlines()]
    active = {r["step"]: r["metrics"]["active"] for r in rows if "active" in r.get("metrics", {})}
    assert len(active) == 20 and all(v == (1.0 if s > 10 else 0.0) for s, v in active.items()), active
    capsys.readouterr()
    assert main(["train", *common, "model.kind=electric", "objective.kind=nce", "electric.embedding_dim=16",
                 "electric.layers=1", "electric.heads=2", "train.steps=30",
                 "run.name=electric"]) == 0
    assert "pseudo-log-likelihood per token, step 30: Electric " in capsys.readouterr().out
    _, model, data, _ = load_run(root / "runs" / "electric")
    x = data.held_out["test"]
    with torch.no_grad():
        pll = float(model.pseudo_log_likelihood(x).sum()) / int(x.lengths.sum())
    got = _eval(root / "runs" / "electric")["figures"]["test"]
    assert got["pll"] == pytest.approx(pll, rel=1e-6) and got["sentences"] == x.batch_size
    assert 0.0 <= got["prefers"] <= 1.0 and got["noise_pll"] < 0.0


def test_the_shakespeare_recipes_run_on_tiny_text(text_runs, tmp_path: Path) -> None:
    root, _ = text_runs
    common = ["data.name=text", f"language.train_path={root}/train.txt", f"language.test_path={root}/test.txt",
              f"run.out_dir={tmp_path}", "run.progress=false", "train.steps=4", "train.batch_size=8",
              "train.log_every=2", "train.checkpoint_every=2"]
    assert main(["train", "char-lstm-shakespeare", *common, "lm.embedding_dim=4", "lm.hidden=8"]) == 0
    assert main(["train", "residual-shakespeare", *common, f"residual.base_run={tmp_path}/char-lstm-shakespeare",
                 "residual.prefix_length=4", "residual.horizon=3", "residual.embedding_dim=8", "residual.negatives=2",
                 "residual.joint_samples=5"]) == 0
    assert main(["train", "earm-shakespeare", *common, "lm.embedding_dim=4", "lm.hidden=8",
                 "lm.earm_start=2"]) == 0
    assert main(["train", "electric-shakespeare", *common, "electric.embedding_dim=8", "electric.heads=2"]) == 0
    figures = {name: _eval(tmp_path / name)["figures"]["test"] for name in
               ("residual-shakespeare", "earm-shakespeare", "electric-shakespeare")}
    assert figures["residual-shakespeare"]["lower"] <= figures["residual-shakespeare"]["upper"]
    assert 1.0 < figures["earm-shakespeare"]["perplexity"] and figures["electric-shakespeare"]["pll"] < 0.0


# -- issue 23: settings a run would ignore -------------------------------------------------------------------
@pytest.mark.parametrize(("extra", "start"), [
    (("earm-addition", "train.steps=20", "generation.earm_start=20"),
     "generation.earm_start: E-ARM is switched on after 20 steps but the run stops at train.steps=20, so it would "
     "never start"),
    (("addition-base", "generation.negatives=4"),
     "generation.negatives: model.kind='transformer' with objective.kind='ml' does not read it, so "
     "generation.negatives=4 would be ignored; it is read with model.kind = residual: drop it"),
    (("addition-base", "generation.earm_weight=0.5"), "generation.earm_weight: model.kind='transformer' with "
                                                      "objective.kind='ml' does not read it"),
    (("addition-base", "model.kind=lstm", "generation.heads=2"), "generation.heads: model.kind='lstm'"),
    (("residual-addition", "generation.base_run=runs/b", "generation.error_rate=0.1"),
     "generation.error_rate: model.kind='residual' with objective.kind='nce' does not read it"),
    (("residual-addition", "generation.base_run=runs/b", "generation.energy=bilstm", "generation.heads=2"),
     "generation.heads: model.kind='residual' with objective.kind='nce' does not read it"),
])
def test_generation_settings_that_would_do_nothing_are_refused(extra: tuple[str, ...], start: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *extra, f"run.out_dir={tmp_path}", "--no-eval"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ebms train: error: {start}") and err.count("\n") == 1, err
