"""Data folder resolution: $EBMS_DATA, then ../shared/data beside the checkout, then ./data."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebms.data import DATA_ENV_VAR, data_path, data_root, paths


def test_env_var_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path / "elsewhere"))
    assert data_root() == tmp_path / "elsewhere"


def test_shared_data_beside_checkout_when_present(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DATA_ENV_VAR, raising=False)
    checkout = tmp_path / "main"
    (tmp_path / "shared" / "data").mkdir(parents=True)
    monkeypatch.setattr(paths, "_checkout_root", lambda: checkout)
    assert data_root() == tmp_path / "shared" / "data"


def test_falls_back_to_cwd_data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DATA_ENV_VAR, raising=False)
    monkeypatch.setattr(paths, "_checkout_root", lambda: tmp_path / "no-such-checkout")
    monkeypatch.chdir(tmp_path)
    assert data_root() == tmp_path / "data"


def test_checkout_root_holds_this_package() -> None:
    root = paths._checkout_root()
    assert root is not None and (root / "src" / "ebms" / "data" / "paths.py").is_file()


def test_missing_data_message_names_env_var(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path))
    with pytest.raises(FileNotFoundError, match=f"data not found .*set {DATA_ENV_VAR}"):
        data_path("mnist", "train.gz")
    assert data_path("mnist", must_exist=False) == tmp_path / "mnist"
    (tmp_path / "mnist").mkdir()
    assert data_path("mnist") == tmp_path / "mnist"


def test_bad_parts_message() -> None:
    with pytest.raises(TypeError, match="parts: expected non-empty strings; got ''"):
        data_path("")
