"""``train.lr_schedule = "sa"`` and ``language.zeta_*``: the source's two-stage SA gains, from the config.

The closed form (Wang, Ou & Tan 2018): :math:`\\gamma_t = 1/(t_c + t^\\beta)` for :math:`t \\le t_0`, then
:math:`1/(t_c + t_0^\\beta + t - t_0)`; the trainer's step ``s = 0, 1, ...`` uses :math:`\\gamma_{s + 1}`.
"""

from __future__ import annotations

import pytest

from ebms.cli._language_trf import TRFSettings
from ebms.cli.build import build_lr_schedule, validate_config
from ebms.cli.config import Config, ConfigError, load_config
from ebms.cli.main import recipe_path
from ebms.cli.run import KEY_ROLES
from ebms.objectives import SAGain


def _gamma(t: int, tc: float, beta: float, t0: int) -> float:
    return 1.0 / (tc + t**beta) if t <= t0 else 1.0 / (tc + t0**beta + t - t0)


@pytest.mark.parametrize(("tc", "beta", "t0"), [(3000.0, 0.0, 2000), (0.0, 0.6, 2000), (2.5, 0.3, 7)])
def test_sa_schedule_equals_the_closed_form(tc: float, beta: float, t0: int) -> None:
    cfg = load_config(None, ["train.lr_schedule=sa", f"train.sa_tc={tc}", f"train.sa_beta={beta}", f"train.sa_t0={t0}"])
    schedule = build_lr_schedule(validate_config(cfg, device=False))
    assert isinstance(schedule, SAGain)
    for t in (1, t0, t0 + 1, 20000):
        assert schedule(t - 1) == pytest.approx(_gamma(t, tc, beta, t0), rel=1e-12), t


def test_the_recipe_rate_is_one_over_3001_then_one_over_t() -> None:
    schedule = build_lr_schedule(validate_config(load_config(recipe_path("trf-ptb")), device=False))
    assert schedule is not None
    assert [schedule(s) for s in (0, 1999)] == [1 / 3001, 1 / 3001]  # steps t = 1 and t = t0 = 2000
    assert schedule(2000) == 1 / 3002 and schedule(19999) == 1 / (3001 + 20000 - 2000)


def test_trf_ptb_recipe_holds_the_sources_settings() -> None:
    cfg = validate_config(load_config(recipe_path("trf-ptb")), device=False)
    s, t = cfg.sections["trf"], cfg.train
    assert (s.order, s.classes, s.features) == (4, 200, ["w", "c", "ws", "cs", "wsh", "csh", "tied"])
    assert (t.steps, t.batch_size, t.optimizer, t.lr, t.lr_schedule) == (20000, 100, "sgd", 1.0, "sa")
    assert (t.sa_tc, t.sa_beta, t.sa_t0, t.weight_decay, t.momentum) == (3000.0, 0.0, 2000, 4e-5, 0.0)
    assert (s.feature_scaling, s.step_clip) == (True, 1.0)
    assert (s.zeta_tc, s.zeta_beta, s.zeta_t0) == (0.0, 0.6, 2000)
    assert (s.chains, s.trials, cfg.sampler.sweeps) == (100, 1, 1)


def test_defaults_keep_the_previous_zeta_gain_and_a_gain_starting_at_one() -> None:
    s, t = TRFSettings(), Config().train
    assert (s.zeta_tc, s.zeta_beta, s.zeta_t0) == (0.0, 0.6, 500)  # AugSA's default SAGain(0, 0.6, 500)
    assert SAGain(t.sa_tc, t.sa_beta, t.sa_t0)(0) == 1.0


def test_sa_keys_are_refused_with_another_schedule() -> None:
    with pytest.raises(ConfigError, match=r"^train\.sa_t0: train\.lr_schedule='linear' does not read it, so "
                                          r"train\.sa_t0=10 would be ignored; it is read with train\.lr_schedule = 'sa'"):
        validate_config(load_config(None, ["train.lr_schedule=linear", "train.sa_t0=10"]), device=False)
    validate_config(load_config(None, ["train.lr_schedule=sa", "train.sa_t0=10"]), device=False)


def test_new_keys_are_training_keys() -> None:
    keys = ("train.sa_tc", "train.sa_beta", "train.sa_t0", "trf.zeta_tc", "trf.zeta_beta", "trf.zeta_t0")
    assert {KEY_ROLES[k] for k in keys} == {"training"}


def test_augsa_takes_its_zeta_gain_from_the_language_keys(tmp_path) -> None:
    from ebms.cli.tasks import task_for

    (tmp_path / "train.txt").write_text("a b c\na b\nb c a\n")
    cfg = validate_config(load_config(None, ["data.name=text", f"language.train_path={tmp_path}/train.txt",
                                             "model.kind=trf", "objective.kind=ml", "trf.zeta_tc=2",
                                             "trf.zeta_beta=0.5", "trf.zeta_t0=3"]), device=False)
    task = task_for(cfg)
    objective = task.build_objective(cfg, task.load(cfg))
    gain = objective.zeta_gain
    assert isinstance(gain, SAGain) and (gain.tc, gain.beta, gain.t0) == (2.0, 0.5, 3)
    assert [gain(t - 1) for t in (1, 3, 4)] == pytest.approx([_gamma(t, 2.0, 0.5, 3) for t in (1, 3, 4)], rel=1e-12)
