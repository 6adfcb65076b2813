"""Suggestions for a misplaced or misspelt key: across sections, exact names first (issue 23).

A key is more often written under the wrong section (``tagging.lr``) or without one (``steps=10``,
``--steps 10``) than misspelt; the suggestion names the key where it lives, with the value given.
"""

from __future__ import annotations

import pytest

from ebms.cli._config_hints import bare_key_hint, key_hint, sections_and_keys
from ebms.cli.config import ConfigError, load_config


def test_an_exact_key_of_another_section_beats_a_near_spelling_in_the_same_one() -> None:
    # 'lr' is 0.5-close to 'layers' (the old suggestion); the exact name train.lr wins
    assert key_hint("tagging", "lr") == "; did you mean 'train.lr'?"


def test_a_near_spelling_in_the_same_section_comes_before_one_elsewhere() -> None:
    assert key_hint("tagging", "hiden") == "; did you mean 'tagging.hidden'?"
    assert key_hint("objective", "buffer_sz") == "; did you mean 'objective.buffer_size'?"


def test_a_near_spelling_in_another_section_is_found_when_the_own_section_has_none() -> None:
    assert key_hint("train", "buffer_sz") == "; did you mean 'objective.buffer_size'?"


def test_an_unknown_key_with_no_near_name_lists_the_sections_keys() -> None:
    assert key_hint("toy", "zzzz") == "; valid keys: toy.scale, toy.noise"


def test_a_key_of_several_sections_lists_each() -> None:
    hint = bare_key_hint("hidden", "8")
    expected = [f"'{sec}.hidden=8'" for sec, keys in sections_and_keys().items() if "hidden" in keys]
    assert len(expected) > 1 and hint == f"; did you mean one of {', '.join(expected)}?"


@pytest.mark.parametrize(("name", "value", "hint"), [
    ("steps", "10", "; did you mean 'train.steps=10'?"),
    ("lr", "0.1", "; did you mean 'train.lr=0.1'?"),
    ("batch-size", "32", "; did you mean 'train.batch_size=32'?"),
    ("step", "10", "; did you mean 'train.steps=10'?"),
    ("train", "3", "; did you mean 'train'?"),
    ("zzzz", "3", ""),
])
def test_a_bare_key_suggests_its_dotted_form_with_its_value(name: str, value: str, hint: str) -> None:
    assert bare_key_hint(name, value) == hint


@pytest.mark.parametrize(("override", "message"), [
    ("tagging.lr=0.1", "tagging.lr: unknown key; did you mean 'train.lr'?"),
    ("lr=0.1", "override 'lr=0.1': expected section.key=value; did you mean 'train.lr=0.1'?"),
    ("steps=10", "override 'steps=10': expected section.key=value; did you mean 'train.steps=10'?"),
    ("zzzz=1", "override 'zzzz=1': expected section.key=value; valid sections: run, data,"),
])
def test_overrides_carry_the_suggestion(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert str(info.value).startswith(message)


def test_a_file_key_outside_its_section_is_suggested_with_its_section(tmp_path) -> None:
    (tmp_path / "c.toml").write_text("steps = 10\n")
    with pytest.raises(ConfigError, match=r"^steps: unknown key; did you mean 'train.steps'\?$"):
        load_config(tmp_path / "c.toml")


@pytest.mark.parametrize(("override", "message"), [
    ("trian.steps=3", "trian: unknown key; did you mean 'train'?"),  # a misspelt section
    ("samplr.kind=gibbs", "samplr: unknown key; did you mean 'sampler'?"),
    ("optimizer.lr=3", "optimizer: unknown key; did you mean 'train.optimizer'?"),  # a key taken for a section
])
def test_an_unknown_section_is_read_as_a_misspelt_section_before_a_misspelt_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert str(info.value) == message
