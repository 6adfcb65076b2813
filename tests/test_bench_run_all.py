"""Peer detection of the benchmark runner: distribution names (what pyproject pins and pip installs)
map to import names (``ebmkit`` is imported as ``ebm``), so an installed peer is never reported
missing and a missing one is named by what to install."""

from __future__ import annotations

import importlib
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _normalise(name: str) -> str:
    """PEP 503 name normalisation (``Scikit_Learn`` and ``scikit-learn`` are one distribution)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _bench_extra() -> list[str]:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["bench"]
    return [_normalise(re.match(r"[A-Za-z0-9._-]+", req).group(0)) for req in extra]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    """``(run_all, _peers)`` imported from benchmarks/, as ``python benchmarks/run_all.py`` sees them."""
    monkeypatch.syspath_prepend(str(BENCH))
    for name in ("run_all", "_peers", "_common"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module("run_all"), importlib.import_module("_peers")


def _fake_distribution(root: Path, *, broken: bool = False) -> None:
    """An installed ``ebmkit 0.16.0`` whose package is ``ebm`` (``broken``: importing it fails)."""
    (root / "ebm").mkdir()
    body = 'raise ImportError("ebm needs a newer torch")\n' if broken else "VERSION = '0.16.0'\n"
    (root / "ebm" / "__init__.py").write_text(body)
    info = root / "ebmkit-0.16.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ebmkit\nVersion: 0.16.0\n")
    (info / "top_level.txt").write_text("ebm\n")


def _check_mapping(peers, dist: str) -> None:
    module = peers.PEER_MODULES[dist]
    providers = {_normalise(d) for d in metadata.packages_distributions().get(module, [])}
    assert _normalise(dist) in providers, f"{dist} is installed but does not provide module {module!r}"
    assert importlib.util.find_spec(module) is not None


def test_every_bench_extra_peer_has_an_import_name(bench) -> None:
    _, peers = bench
    assert sorted(_bench_extra()) == sorted(_normalise(d) for d in peers.PEER_MODULES)


def test_every_installed_bench_peer_maps_to_a_module_it_provides(bench) -> None:
    _, peers = bench
    installed = [d for d in peers.PEER_MODULES if peers.installed_version(d) is not None]
    for dist in installed:
        _check_mapping(peers, dist)
    assert set(peers.missing_peers()) == set(peers.PEER_MODULES) - set(installed)


def test_installed_ebmkit_is_not_reported_missing(bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_all, peers = bench
    _fake_distribution(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    _check_mapping(peers, "ebmkit")
    assert "ebmkit" not in run_all.missing_peers()


def test_missing_ebm_module_is_a_skip_that_names_ebmkit(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    run_all, _ = bench
    monkeypatch.setattr(run_all, "installed_version", lambda dist: None)  # the same words whether or not it is here
    stderr = "Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module named 'ebm'\n"
    reason = run_all.skip_reason(stderr)
    assert reason is not None and reason.startswith("peer library ebmkit is not installed")
    assert run_all.skip_reason("ModuleNotFoundError: No module named 'sklearn.neural_network'").startswith(
        "peer library scikit-learn")
    assert run_all.skip_reason("ModuleNotFoundError: No module named 'numpyy'") is None  # not a peer: a failure


def test_import_peer_names_the_distribution_to_install(bench, capsys: pytest.CaptureFixture[str]) -> None:
    common = importlib.import_module("_common")
    if importlib.util.find_spec("ebm") is not None:
        pytest.skip("ebmkit is installed here")
    assert common.import_peer("ebm.ais") is None
    err = capsys.readouterr().err
    assert err.startswith("skipping ebmkit (import ebm.ais): not installed")
    assert 'pip install -e ".[bench]"' in err


def test_import_peer_tells_installed_but_broken_from_missing(bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    _fake_distribution(tmp_path, broken=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ebm", raising=False)
    common = importlib.import_module("_common")
    assert common.import_peer("ebm") is None
    err = capsys.readouterr().err
    assert err.startswith("skipping ebmkit 0.16.0: installed, but import ebm failed (ebm needs a newer torch)")
