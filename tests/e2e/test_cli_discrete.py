"""The command line on binary images: train an RBM and a deep binary EBM, evaluate with exact and AIS log Z."""

from __future__ import annotations

import json

import pytest

from ebms.cli.main import main

pytest.importorskip("sklearn", reason="the digits recipes need scikit-learn's bundled digits")

QUICK = ["run.progress=false", "train.steps=150", "train.log_every=50", "train.checkpoint_every=150",
         "eval.n_samples=20", "eval.sample_steps=50", "eval.ais_temperatures=300", "eval.ais_chains=64"]


@pytest.fixture(scope="module")
def rbm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    assert main(["train", "rbm-digits", f"run.out_dir={out}", *QUICK]) == 0
    return out / "rbm-digits"


def test_rbm_recipe_trains_and_reports_an_exact_test_log_likelihood(rbm_run):
    report = json.loads((rbm_run / "eval.json").read_text())
    assert report["log_z_method"] == "exact"
    assert report["test_ll"] < 0 and report["test_ll_stderr"] > 0
    assert (rbm_run / "samples.png").is_file()
    assert 'binarize = "threshold"' in (rbm_run / "config.toml").read_text()  # binarisation recorded


def test_eval_ais_agrees_with_the_exact_log_z_and_brackets_it(rbm_run, capsys):
    assert main(["eval", "--run", str(rbm_run), "--ais", *QUICK]) == 0
    out = capsys.readouterr().out
    assert "AIS log Z" in out and "AIS/reverse-AIS log Z bracket" in out
    r = json.loads((rbm_run / "eval.json").read_text())
    # 5 standard errors: AIS with 300 temperatures on a 16-hidden RBM is unbiased to well within that
    assert abs(r["ais_log_z"] - r["exact_log_z"]) < 5 * r["ais_log_z_stderr"] + 0.05
    assert r["ais_lower"] <= r["exact_log_z"] <= r["ais_upper"]


def test_deep_binary_ebm_recipe_trains_with_gwg_and_needs_ais_for_its_likelihood(tmp_path, capsys):
    args = ["train", "binary-ebm-digits", f"run.out_dir={tmp_path}", *QUICK, "train.steps=40", "objective.k=5",
            "train.checkpoint_every=40", "model.hidden=[32]"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "estimate the test log-likelihood with `ebms eval --run DIR --ais`" in out
    assert main(["eval", "--run", str(tmp_path / "binary-ebm-digits"), "--ais", *QUICK, "eval.reverse_ais=false"]) == 0
    r = json.loads((tmp_path / "binary-ebm-digits" / "eval.json").read_text())
    assert r["log_z_method"] == "AIS" and r["test_ll"] < 0


def test_continuous_kernels_on_binary_images_are_refused(tmp_path, capsys):
    assert main(["train", "rbm-digits", f"run.out_dir={tmp_path}", "sampler.kind=mala"]) == 2
    assert "sampler.kind: 'mala' does not move on binary data; expected one of block_gibbs, gibbs, gwg, mh" in (
        capsys.readouterr().err
    )


def test_overwrite_with_a_bad_configuration_leaves_the_old_run_intact(rbm_run, capsys):
    out_dir = rbm_run.parent
    before = sorted(p.name for p in (rbm_run / "checkpoints").iterdir())
    for bad in ("model.hidden=[3, 4]", "train.optimizer=adamw", "sampler.kind=ula"):
        assert main(["train", "rbm-digits", f"run.out_dir={out_dir}", "--overwrite", bad]) == 2
        assert sorted(p.name for p in (rbm_run / "checkpoints").iterdir()) == before, bad
    assert "train.optimizer: unknown value 'adamw'" in capsys.readouterr().err


def test_block_gibbs_on_a_model_without_layers_or_colouring_is_a_config_error(tmp_path, capsys):
    args = ["train", "binary-ebm-digits", f"run.out_dir={tmp_path}", "sampler.kind=block_gibbs", *QUICK]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "sampler.kind: 'block_gibbs' needs a model with layer conditionals" in err
    assert not (tmp_path / "binary-ebm-digits" / "checkpoints").exists()


def test_eval_report_separates_noise_from_a_reverse_run_that_is_clearly_too_low():
    from ebms.estimators.evaluation import DiscreteEvalReport

    def lines(gap):
        a = {"forward": 10.0, "forward_stderr": 0.3, "reverse": 10.0 + gap, "reverse_stderr": 0.4,
             "gap": gap, "crossed": gap < 0, "z": 2.0}
        r = DiscreteEvalReport(step=1, n_test=2, dim=4, test_ll=-1.0, test_ll_stderr=0.1, log_z=10.0,
                               log_z_method="AIS", ais_log_z=10.0, ais_log_z_stderr=0.3, ais_lower=9.0,
                               ais_upper=11.0, ll_lower=-2.0, ll_upper=0.0, settings={"ais_settings": a})
        return "\n".join(r.lines())

    assert "crossed within noise" in lines(-0.5)  # 0.5 < 2 * sqrt(0.3^2 + 0.4^2) = 1.0
    assert "not model samples yet" in lines(-3.0)
    assert "crossed" not in lines(+0.4) and "not model samples" not in lines(+0.4)
