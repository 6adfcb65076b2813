"""End-to-end: semi-supervised chunking with a JRF on the command line (``ebms.cli.jrf``).

A small CoNLL-2000-format corpus of its own (random sentences from a fixed word/tag table, written
under ``data.root``) keeps these runs fast and independent of the real data. Checked: the labelled
rows are the seeded draw and the unlabelled rows never show their tags; ``zeta`` starts where the
marginal matches the noise; ``log_z`` trains at ``jrf.zeta_lr``; ``eval``'s F1 equals conlleval of
the loaded model's Viterbi tags; a resumed run equals an uninterrupted one bit for bit; the
supervised baseline (``objective.kind = "crf"``) sees labelled rows only; ``(conll2000, jrf)``
goes to this task while ``conll2000`` alone still goes to the CRF taggers.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from _apply_data import write_conll2000

from ebms.cli.config import load_config
from ebms.cli.jrf import JRFTask
from ebms.cli.main import main
from ebms.cli.run import build_seeded_model, load_run
from ebms.cli.tagging import TaggingTask
from ebms.cli.tasks import task_for
from ebms.data.conll import load_conll2000
from ebms.metrics.chunking import conlleval
from ebms.sequences import Sequences

WORDS = [("the", "DT", "B-NP"), ("cat", "NN", "I-NP"), ("dog", "NN", "I-NP"), ("sat", "VBD", "B-VP"),
         ("ran", "VBD", "B-VP"), ("on", "IN", "B-PP"), ("mat", "NN", "B-NP"), (".", ".", "O")]


def _corpus(n: int, seed: int) -> str:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(2, 6)
        out.append("".join(f"{w} {p} {t}\n" for w, p, t in (rng.choice(WORDS) for _ in range(k))) + "\n")
    return "".join(out)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("conll")
    return write_conll2000(r, _corpus(60, 0), _corpus(20, 1))


def _args(root: Path, out: Path, *extra: str) -> list[str]:
    noise = [] if "objective.kind=crf" in extra else ["jrf.noise_hidden=8", "jrf.noise_steps=5"]  # the JRF's noise LM
    return ["run.progress=false", f"run.out_dir={out}", "data.name=conll2000", "model.kind=jrf", f"data.root={root}",
            "jrf.label_fraction=0.2", "jrf.embed=8", "jrf.hidden=8", *noise, "train.batch_size=8", "train.log_every=2",
            "train.checkpoint_every=3", *extra]


def test_routing_by_model_kind(root: Path, tmp_path: Path) -> None:
    assert isinstance(task_for(load_config(None, _args(root, tmp_path))), JRFTask)
    plain = load_config(None, ["data.name=conll2000"])
    assert isinstance(task_for(plain), TaggingTask) and plain.model.kind == "bilstm-crf"
    cfg = load_config(None, _args(root, tmp_path))
    assert cfg.objective.kind == "jrf" and cfg.train.grad_clip == 5.0


def test_labelled_rows_are_the_seeded_draw_and_unlabelled_tags_stay_hidden(root: Path, tmp_path: Path) -> None:
    cfg = load_config(None, _args(root, tmp_path, "run.seed=3"))
    task = JRFTask()
    data = task.load(cfg)
    words, tags, lengths = data.train
    assert words.shape[0] == 12  # round(0.2 * 60)
    want = torch.randperm(60, generator=torch.Generator().manual_seed(3))[:12].sort().values.tolist()
    sents = load_conll2000("train", root)
    names = data.info["tags"]
    got_tags = [[names[int(t)] for t in row[: int(n)]] for row, n in zip(tags, lengths)]
    assert got_tags == [sents[i].tags for i in want]  # the labelled rows are the seeded draw, in order
    u_words, u_lengths = data.info["unlabelled"]
    assert u_words.shape[0] == 48
    assert u_lengths.tolist() == [len(sents[i]) for i in range(60) if i not in want]
    labelled_rows = {tuple(w[: int(n)].tolist()) for w, n in zip(words, lengths)}
    draw = task.training_data(cfg, data)
    w, y, n = draw(9, torch.Generator().manual_seed(0))
    assert w.shape[0] == 9 and bool((y[5:] == -1).all()) and bool((y[:5] >= 0).all())
    for row, k in zip(w[:5], n[:5]):  # labelled rows come from the labelled draw
        assert tuple(row[: int(k)].tolist()) in labelled_rows
    crf_cfg = load_config(None, _args(root, tmp_path, "run.seed=3", "objective.kind=crf"))
    w, y, n = task.training_data(crf_cfg, data)(9, torch.Generator().manual_seed(0))
    assert w.shape[0] == 9 and bool((y[torch.arange(w.shape[1]) < n[:, None]] >= 0).all())


def test_zeta_starts_where_the_marginal_matches_the_noise_and_trains_at_its_own_rate(root: Path,
                                                                                   tmp_path: Path) -> None:
    cfg = load_config(None, _args(root, tmp_path, "jrf.zeta_lr=0.07", "train.weight_decay=0.01"))
    task = JRFTask()
    data = task.load(cfg)
    model = build_seeded_model(cfg, task, data)
    objective = task.build_objective(cfg, data)
    u_words, u_lengths = data.info["unlabelled"]
    x = Sequences(u_words, u_lengths)
    noise = objective.dnce.noise
    with torch.no_grad():
        model.eval()
        gap = model.log_prob(x) - noise.log_prob(x)
    for length in u_lengths.unique():
        assert abs(float(gap[u_lengths == length].mean())) < 1e-4
    groups = [{"params": list(model.parameters())}, {"params": list(objective.parameters())}]
    opt = task.build_optimizer(cfg, data)(groups)
    (zeta_group,) = [g for g in opt.param_groups if any(p is model.log_z for p in g["params"])]
    assert zeta_group["lr"] == 0.07 and len(zeta_group["params"]) == 1
    assert zeta_group["weight_decay"] == 0.0  # decay would pull log Z_l towards 0
    assert all(g["lr"] == cfg.train.lr and g["weight_decay"] == 0.01 for g in opt.param_groups if g is not zeta_group)
    assert sum(len(g["params"]) for g in opt.param_groups) == sum(len(g["params"]) for g in groups)


def test_eval_f1_is_conlleval_of_the_loaded_models_viterbi_tags(root: Path, tmp_path: Path) -> None:
    assert main(["train", *_args(root, tmp_path, "run.name=j", "train.steps=6")]) == 0
    got = json.loads((tmp_path / "j" / "eval.json").read_text())
    cfg, model, data, step = load_run(tmp_path / "j")
    assert step == 6
    test = data.test
    model.eval()
    with torch.no_grad():
        pred = model.decode(Sequences(test["words"], test["lengths"]))
    names = data.info["tags"]
    pred_tags = [[names[int(t)] for t in row[: int(n)]] for row, n in zip(pred, test["lengths"])]
    want = conlleval(test["gold"], pred_tags)
    assert got["figures"]["f1"] == pytest.approx(want.f1, abs=1e-9)
    assert got["figures"]["accuracy"] == pytest.approx(want.accuracy, abs=1e-9)
    assert main(["sample", str(tmp_path / "j")]) == 2  # a conditional task: no samples


def test_resumed_run_equals_an_uninterrupted_one(root: Path, tmp_path: Path) -> None:
    a = ["train", *_args(root, tmp_path / "a", "run.name=r", "--no-eval")]
    b = ["train", *_args(root, tmp_path / "b", "run.name=r", "--no-eval")]
    assert main([*a, "train.steps=6"]) == 0
    assert main([*b, "train.steps=3"]) == 0
    assert main([*b, "train.steps=6", "--resume"]) == 0
    _, ma, _, _ = load_run(tmp_path / "a" / "r")
    _, mb, _, _ = load_run(tmp_path / "b" / "r")
    for (name, p), q in zip(ma.state_dict().items(), mb.state_dict().values()):
        assert torch.equal(p, q), name


def test_the_supervised_baseline_trains_and_evaluates(root: Path, tmp_path: Path) -> None:
    assert main(["train", *_args(root, tmp_path, "run.name=s", "objective.kind=crf", "train.steps=4")]) == 0
    got = json.loads((tmp_path / "s" / "eval.json").read_text())
    assert 0.0 <= got["figures"]["f1"] <= 100.0


# -- issue 23 ----------------------------------------------------------------------------------------------
def test_a_run_keeps_its_word_and_tag_lists_and_refuses_edited_training_files(
        root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    (data / "conll2000").mkdir(parents=True)
    for name in ("train.txt", "test.txt"):
        (data / "conll2000" / name).write_text((root / "conll2000" / name).read_text())
    assert main(["train", *_args(data, tmp_path, "run.name=v", "train.steps=2", "--no-eval")]) == 0
    run = tmp_path / "v"
    stored = json.loads((run / "vocab.json").read_text())
    _, _, loaded, _ = load_run(run)
    assert loaded.info["tags"] == stored["tags"] and stored["words"][:2] == ["<pad>", "<unk>"]
    train = data / "conll2000" / "train.txt"
    train.write_text(train.read_text().replace("cat NN", "dog NN"))  # word counts, hence word ids, change
    capsys.readouterr()
    assert main(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ebms eval: error: data.root: the conll2000 training sentences are not the ones this run "
                          "was trained on") and err.count("\n") == 1, err


def test_keys_the_supervised_baseline_does_not_read_are_refused(root: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *_args(root, tmp_path, "objective.kind=crf", "jrf.alpha=0.5")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ebms train: error: jrf.alpha: objective.kind='crf' does not read it, so jrf.alpha=0.5 "
                          "would be ignored; it is read with objective.kind = jrf: drop it"), err


def test_a_sentence_longer_than_the_jrf_takes_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A CoNLL file without the blank lines between sentences reads as one sentence; its length would
    size the JRF's length law and its noise draws."""
    from ebms.cli.jrf import MAX_SENTENCE

    (tmp_path / "conll2000").mkdir()
    (tmp_path / "conll2000" / "train.txt").write_text(_corpus(20, 0).replace("\n\n", "\n") * 40 + "\n")
    (tmp_path / "conll2000" / "test.txt").write_text(_corpus(5, 1))
    assert main(["train", *_args(tmp_path, tmp_path, "train.steps=1", "--no-eval")]) == 2
    err = capsys.readouterr().err
    assert f"the JRF takes at most {MAX_SENTENCE}" in err and err.startswith("ebms train: error: data.root: the "
                                                                              "longest conll2000 training sentence has")
