"""A checkpoint's identity holds what changes the trained weights and nothing else (issue 23).

Every key of every section has one role in ``ebms.cli.run.KEY_ROLES``; the table is checked to be
complete, so a key added to any section fails here until it is classified. The identity a resume
compares and the part ``eval``/``sample`` compare follow from the roles. The command-line checks
(changing ``vision.ood`` after training, refusing a changed weight key) are in
``tests/e2e/test_cli_vision.py``.
"""

from __future__ import annotations

from ebms.cli.config import config_keys, load_config
from ebms.cli.run import KEY_ROLES, ROLES, key_role, model_identity, run_identity


def test_every_key_of_every_section_has_exactly_one_role() -> None:
    keys = set(config_keys())
    missing, unknown = sorted(keys - set(KEY_ROLES)), sorted(set(KEY_ROLES) - keys)
    assert not missing, f"keys without a role in ebms.cli.run.KEY_ROLES (classify them): {missing}"
    assert not unknown, f"KEY_ROLES lists keys no section has: {unknown}"
    assert set(KEY_ROLES.values()) <= set(ROLES)
    assert key_role("mytask.width") == "model"  # a task registered outside the package: in the identity


def test_the_identity_holds_what_changes_the_weights_and_nothing_else() -> None:
    cfg = load_config(None, ["data.name=mnist", "model.kind=jem", "vision.ood=['noise']", "data.root=/tmp"])
    ident, model = run_identity(cfg), model_identity(cfg)
    for key in ("vision.ood", "vision.ood_size", "vision.ece_bins", "vision.snapshot_every", "eval.n_samples",
                "data.n_test", "train.steps", "train.log_every", "run.name", "run.progress", "data.root"):
        assert key not in ident, key
    for key in ("vision.channels", "vision.generative_weight", "model.kind", "objective.k", "run.seed", "data.name"):
        assert key in ident and key in model, key
    for key in ("train.lr", "train.batch_size", "sampler.step_size", "run.device"):  # resume checks, eval may set
        assert key in ident and key not in model, key


def test_every_task_section_is_split_as_its_evaluation_reads_it() -> None:
    evaluation = {k for k, r in KEY_ROLES.items() if r == "eval"}
    assert evaluation == {
        "data.n_test", "eval.resolution", "eval.n_samples", "eval.sample_steps", "eval.ais_chains",
        "eval.ais_temperatures", "eval.reverse_ais", "eval.ema", "trf.logz_samples", "residual.joint_samples",
        "generation.joint_samples", "generation.top_k", "generation.mm_alpha", "generation.mm_epochs",
        "generation.cold_lambda", "generation.cold_steps", "generation.cold_step_size", "generation.cold_top_k",
        "vision.ood", "vision.ood_size", "vision.ece_bins", "textclass.ece_bins"}
    assert {k for k, r in KEY_ROLES.items() if r == "location"} == {
        "data.path", "data.root", "data.max_mb", "images.download", "language.train_path", "language.valid_path",
        "language.test_path", "language.tokenizer", "huggingface.path", "textclass.csv"}  # the run keeps a tokenizer's / model's content
