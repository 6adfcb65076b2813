"""End-to-end: ``ebms train`` on the CoNLL tagging tasks (ebms.cli.tagging) and its config errors."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import pytest
import torch

from ebms.cli.config import load_config
from ebms.cli.main import main
from ebms.cli.tagging import FeatureCRFTask, TaggingTask
from ebms.cli.tasks import task_for
from ebms.data.paths import DATA_ENV_VAR, data_root

RECIPES = ["bilstm-crf-conll2000", "bilstm-crf-conll2002", "crf-transducer-conll2000", "feature-crf-conll2000",
           "feature-crf-conll2002"]
QUICK = ["run.progress=false", "train.log_every=5", "train.checkpoint_every=5", "tagging.limit=120"]
SMALL_NET = ["tagging.embedding_dim=16", "tagging.hidden=16", "train.batch_size=20", "train.lr=0.01"]


def _need(name: str) -> None:
    path = data_root() / name / f"{name}.zip"
    if not path.is_file():
        pytest.skip(f"{path} absent: set {DATA_ENV_VAR} to the folder holding {name}/{name}.zip")


def _eval(run: Path) -> dict:
    return json.loads((run / "eval.json").read_text())


def test_bilstm_crf_trains_writes_f1_and_resumes(tmp_path, capsys):
    _need("conll2000")
    args = ["train", "data.name=conll2000", "model.kind=bilstm-crf", "objective.kind=crf", f"run.out_dir={tmp_path}",
            "run.name=chunk", *QUICK, *SMALL_NET]
    assert main([*args, "train.steps=10"]) == 0, capsys.readouterr().err
    report = _eval(tmp_path / "chunk")
    assert report["step"] == 10 and report["task"] == "conll2000"
    assert {"precision", "recall", "f1", "accuracy"} <= set(report["figures"])
    assert 0.0 <= report["figures"]["f1"] <= 100.0
    assert main([*args, "train.steps=15", "--resume"]) == 0, capsys.readouterr().err
    assert _eval(tmp_path / "chunk")["step"] == 15
    assert main(["eval", "--run", str(tmp_path / "chunk")]) == 0
    assert "conll2000 test, step 15: precision" in capsys.readouterr().out


def test_cnn_crf_with_characters_and_nce_on_spanish_ner_reports_testa(tmp_path, capsys):
    _need("conll2002")
    args = ["train", "data.name=conll2002-esp", "model.kind=cnn-crf", "tagging.char_dim=8", "objective.kind=crf-nce",
            "objective.nu=2", f"run.out_dir={tmp_path}", "run.name=ner", "train.steps=5", *QUICK, *SMALL_NET]
    assert main(args) == 0, capsys.readouterr().err
    figures = _eval(tmp_path / "ner")["figures"]
    assert {"f1", "testa_f1", "accuracy", "testa_accuracy", "token_f1", "testa_token_f1"} <= set(figures)


def test_feature_crf_with_owlqn_matches_the_corpus_objective(tmp_path, capsys):
    _need("conll2000")
    pytest.importorskip("ebms.models.feature_crf")
    args = ["train", "data.name=conll2000", "model.kind=feature-crf", "objective.kind=crf", "tagging.c1=0.5",
            "tagging.c2=1.0", "train.optimizer=lbfgs", "train.batch_size=120", f"run.out_dir={tmp_path}",
            "run.name=feat", "train.steps=4", *QUICK, "train.log_every=1"]
    assert main(args) == 0, capsys.readouterr().err
    figures = _eval(tmp_path / "feat")["figures"]
    assert figures["f1"] > 10.0  # four OWL-QN iterations already find many chunks
    lines = [json.loads(x) for x in (tmp_path / "feat" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in lines if "loss" in r]
    assert losses and all(a >= b for a, b in zip(losses, losses[1:]))


@pytest.mark.parametrize("objective", ["crf", "crf-nce"])
def test_feature_crf_minibatch_training_on_ner_runs_from_the_unpadded_corpus(objective, tmp_path, capsys):
    _need("conll2002")
    args = ["train", "data.name=conll2002-esp", "model.kind=feature-crf", f"objective.kind={objective}",
            "train.optimizer=adam", "train.batch_size=16", "train.lr=0.05", f"run.out_dir={tmp_path}", "run.name=mb",
            "train.steps=5", *QUICK]
    assert main(args) == 0, capsys.readouterr().err
    figures = _eval(tmp_path / "mb")["figures"]
    assert 0.0 <= figures["accuracy"] <= 100.0 and "testa_accuracy" in figures


def test_feature_crf_loss_is_crfsuite_objective_over_n(tmp_path):
    _need("conll2000")
    pytest.importorskip("ebms.models.feature_crf")
    cfg = load_config(None, ["data.name=conll2000", "model.kind=feature-crf", "objective.kind=crf", "tagging.limit=30",
                             "tagging.c2=2.0",
                             "train.optimizer=lbfgs", "train.batch_size=30"])
    task = FeatureCRFTask()
    data = task.load(cfg)
    model = task.build_model(cfg, data)
    with torch.no_grad():
        model.state_values.normal_(0, 0.1)
        model.transition_values.normal_(0, 0.1)
    objective = task.build_objective(cfg, data)
    rows, tags, lengths = data.train
    assert rows.shape == (30,) and tags.shape[0] == 30  # row ids into the unpadded corpus
    loss = objective(model, data.train).loss.detach()  # a full batch: the compact CSR path
    shuffled = tuple(t[torch.randperm(30, generator=torch.Generator().manual_seed(0))] for t in data.train)
    assert float(objective(model, shuffled).loss.detach()) == pytest.approx(float(loss), rel=1e-12)
    ids, weights, _ = data.info["corpus"].padded()
    with torch.no_grad():
        w, a = model.effective_weights()
        nll = sum(-float(model(ids[i : i + 1, : lengths[i]], weights[i : i + 1, : lengths[i]], lengths[i : i + 1])
                         .log_prob(tags[i : i + 1, : lengths[i]])) for i in range(30))
        l2 = float((model.state_values ** 2).sum() + (model.transition_values ** 2).sum())
        part = objective(model, tuple(t[:20] for t in data.train)).loss  # not a full batch: padded path
        nll20 = sum(-float(model(ids[i : i + 1, : lengths[i]], weights[i : i + 1, : lengths[i]], lengths[i : i + 1])
                           .log_prob(tags[i : i + 1, : lengths[i]])) for i in range(20))
    assert float(loss) == pytest.approx((nll + 2.0 * l2) / 30, rel=1e-9)
    assert float(part) == pytest.approx(nll20 / 20 + 2.0 / 30 * l2, rel=1e-9)
    assert bool((w[~model.state_mask] == 0).all()) and a.shape == (len(data.info["tags"]),) * 2


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.kind=bilstm-crff", r"model.kind: unknown value 'bilstm-crff'.*; expected one of bilstm-crf, "
                                   r"cnn-crf, crf-transducer, feature-crf, jrf; did you mean 'bilstm-crf'\?"),
        ("objective.kind=crf-nse", r"objective.kind: unknown value 'crf-nse'.*; expected one of crf, crf-nce; "
                                   r"did you mean 'crf-nce'\?"),
        ("tagging.hidden=0", r"tagging.hidden: expected an integer >= 1; got 0"),
        ("model.hidden=[16,16]", r"model.hidden: the MLP's hidden widths; the CoNLL taggers' width is tagging.hidden"),
        ("model.embedding_dim=16", r"model.embedding_dim: renamed; use tagging.embedding_dim"),
        ("tagging.c1=0.1", r"tagging.c1: an L1 term needs train.optimizer='lbfgs' \(OWL-QN\)"),
        ("objective.kind=crf-nce train.optimizer=lbfgs",
         "train.optimizer: crf-nce draws fresh noise sequences at every evaluation"),
        ("objective.kind=crf-nce tagging.c2=1.0", "tagging.c1/c2: the L1/L2 terms belong to the crf objective"),
        ("tagging.beam=4", r"tagging.beam: model.kind='bilstm-crf' does not read it, so tagging.beam=4 would be "
                           r"ignored; it is read with model.kind = crf-transducer: drop it"),
        ("model.kind=crf-transducer", r"objective.kind: unknown value 'crf' for data.name='conll2000' \(a structured "
                                      r"task\); expected one of early-update, monte-carlo; 'crf' trains model.kind = "
                                      r"bilstm-crf, cnn-crf, feature-crf, jrf: set model.kind to one of them"),
        ("model.kind=crf-transducer objective.kind=monte-carlo train.optimizer=lbfgs",
         "train.optimizer: monte-carlo draws fresh tag sequences at every evaluation"),
        ("model.kind=crf-transducer objective.kind=early-update tagging.beam=0",
         r"tagging.beam: expected an integer >= 1; got 0"),
        ("model.kind=crf-transducer objective.kind=early-update tagging.mc_samples=4",
         r"tagging.mc_samples: model.kind='crf-transducer' with objective.kind='early-update' does not read it, so "
         r"tagging.mc_samples=4 would be ignored; it is read with model.kind = crf-transducer and objective.kind = "
         r"monte-carlo: drop it"),
        ("model.kind=crf-transducer objective.kind=monte-carlo tagging.mc_samples=0",
         r"tagging.mc_samples: expected an integer >= 1; got 0"),
        ("model.kind=crf-transducer objective.kind=monte-carlo tagging.mc_proposal=unifrom",
         r"tagging.mc_proposal: unknown value 'unifrom'; expected one of model, uniform; did you mean 'uniform'\?"),
        ("model.kind=crf-transducer objective.kind=early-update tagging.potentials=softmax",
         r"tagging.potentials: unknown value 'softmax'; expected one of log_softmax, raw; did you mean 'log_softmax'\?"),
        ("model.kind=crf-transducer objective.kind=early-update tagging.c2=1.0",
         r"tagging.c2: model.kind='crf-transducer' with objective.kind='early-update' does not read it"),
    ],
)
def test_bad_tagging_configuration_is_a_one_line_error(override, message, tmp_path, capsys):
    args = ["train", "data.name=conll2000", "model.kind=bilstm-crf", "tagging.hidden=16", "objective.kind=crf",
            f"run.out_dir={tmp_path}"]
    assert main([*args, *override.split()]) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(message, err) and len(err.splitlines()) == 1, err


@pytest.mark.parametrize(("objective", "metric"), [("early-update", "early"), ("monte-carlo", "ess")])
def test_crf_transducer_trains_by_its_objective_writes_f1_and_resumes(objective, metric, tmp_path, capsys):
    """``model.kind = "crf-transducer"``: beam search with early updates or the Monte Carlo NLL (each logs its own
    metric: the share of early updates, the effective sample size), decoded by beam search; eval and a resume."""
    _need("conll2000")
    args = ["train", "data.name=conll2000", "model.kind=crf-transducer", f"objective.kind={objective}",
            f"run.out_dir={tmp_path}", "run.name=ct", "tagging.beam=4", *QUICK, *SMALL_NET]
    if objective == "monte-carlo":
        args.append("tagging.mc_samples=4")
    assert main([*args, "train.steps=10"]) == 0, capsys.readouterr().err
    report = _eval(tmp_path / "ct")
    assert report["step"] == 10 and 0.0 <= report["figures"]["f1"] <= 100.0
    lines = [json.loads(x) for x in (tmp_path / "ct" / "metrics.jsonl").read_text().splitlines()]
    logged = [r["metrics"] for r in lines if "metrics" in r]
    assert len(logged) == 2 and all(metric in r for r in logged)
    if objective == "monte-carlo":
        assert all(1.0 <= r["ess"] <= 4.0 for r in logged)
    else:
        assert all(0.0 <= r["early"] <= 1.0 for r in logged)
    assert main([*args, "train.steps=15", "--resume"]) == 0, capsys.readouterr().err
    assert _eval(tmp_path / "ct")["step"] == 15
    capsys.readouterr()
    assert main(["eval", "--run", str(tmp_path / "ct")]) == 0
    assert f"f1 {_eval(tmp_path / 'ct')['figures']['f1']:.4g}" in capsys.readouterr().out


def test_nce_needs_a_whole_number_of_noise_sequences(tmp_path, capsys):
    args = ["train", "data.name=conll2000", "model.kind=bilstm-crf", "tagging.hidden=16", "objective.kind=crf-nce",
            "objective.nu=0.5",
            f"run.out_dir={tmp_path}"]
    assert main(args) == 2
    assert "objective.nu: expected a whole number >= 1" in capsys.readouterr().err


def test_unknown_feature_set_is_named(tmp_path, capsys):
    pytest.importorskip("ebms.structured.features")
    args = ["train", "data.name=conll2000", "model.kind=feature-crf", "objective.kind=crf",
            "tagging.features=crfsuite-chunkin",
            "train.optimizer=lbfgs", f"run.out_dir={tmp_path}"]
    assert main(args) == 2
    assert "tagging.features: unknown value 'crfsuite-chunkin'" in capsys.readouterr().err


@pytest.mark.parametrize("name", RECIPES)
def test_tagging_recipes_load_and_say_what_they_are(name):
    path = Path(str(resources.files("ebms.recipes").joinpath(f"{name}.toml")))
    assert path.read_text().startswith("# ")
    cfg = load_config(path)
    assert cfg.data.name in TaggingTask.data_names and cfg.run.name == name


def test_missing_data_is_a_config_error_naming_the_data_set(tmp_path, capsys):
    args = ["train", "data.name=conll2000", f"data.root={tmp_path}", "model.kind=bilstm-crf", "tagging.hidden=16",
            "objective.kind=crf", f"run.out_dir={tmp_path}"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ebms train: error: data.name='conll2000': conll2000/train.txt: not found")
    assert len(err.splitlines()) == 1


# -- issue 23: a run keeps its maps; keys the model kind does not read ---------------------------------------
_CONLL = ("He PRP B-NP\nreckons VBZ B-VP\nthe DT B-NP\ndeficit NN I-NP\n. . O\n\n"
          "Rockwell NNP B-NP\nsaid VBD B-VP\nthe DT B-NP\nagreement NN I-NP\ncalls VBZ B-VP\n. . O\n\n")


@pytest.mark.parametrize("kind", ["bilstm-crf", "feature-crf"])
def test_a_tagger_keeps_its_maps_and_refuses_training_files_edited_since(kind, tmp_path, capsys):
    """Rebuilt from an edited training file, the word (or attribute) and tag ids would move under the
    trained weights; the run's vocab.json keeps them, and a changed training set is refused."""
    (tmp_path / "conll2000").mkdir()
    train = tmp_path / "conll2000" / "train.txt"
    train.write_text(_CONLL * 6)
    (tmp_path / "conll2000" / "test.txt").write_text(_CONLL)
    net = ["tagging.embedding_dim=4", "tagging.hidden=4", "tagging.char_dim=2"] if kind == "bilstm-crf" else []
    args = ["train", "data.name=conll2000", f"data.root={tmp_path}", f"model.kind={kind}", "objective.kind=crf", *net,
            "train.steps=2", "train.batch_size=4", f"run.out_dir={tmp_path}", "run.name=t", "run.progress=false"]
    assert main(args) == 0, capsys.readouterr().err
    run = tmp_path / "t"
    stored = json.loads((run / "vocab.json").read_text())
    cfg = load_config(None, args[1:-3])
    assert stored["tags"] == task_for(cfg).load(cfg).info["tags"]  # type: ignore[union-attr]
    assert ("words" in stored and "chars" in stored) if kind == "bilstm-crf" else stored["attributes"][0] == "<pad>"
    train.write_text(_CONLL.replace("B-VP", "B-ADJP") * 6)  # same sentences, other tags
    capsys.readouterr()
    assert main(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ebms eval: error: data.root: the conll2000 training sentences are not the ones this run was "
                          "trained on") and err.count("\n") == 1, err
    train.write_text(_CONLL * 6)
    assert main(["eval", str(run)]) == 0


@pytest.mark.parametrize(("kind", "override", "start"), [
    ("bilstm-crf", "tagging.features=crfsuite-chunking", "tagging.features: model.kind='bilstm-crf' does not read it"),
    ("feature-crf", "tagging.hidden=16", "tagging.hidden: model.kind='feature-crf' does not read it"),
    ("feature-crf", "tagging.char_dim=8", "tagging.char_dim: model.kind='feature-crf' does not read it, so "
                                          "tagging.char_dim=8 would be ignored; it is read with model.kind = "
                                          "bilstm-crf, cnn-crf, crf-transducer: drop it"),
])
def test_a_tagging_key_the_model_does_not_read_is_refused(kind, override, start, tmp_path, capsys):
    args = ["train", "data.name=conll2000", f"model.kind={kind}", "objective.kind=crf", override,
            f"run.out_dir={tmp_path}"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ebms train: error: {start}") and err.count("\n") == 1, err
