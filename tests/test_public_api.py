"""Every name in every ``__all__`` imports, and the version string is single-sourced."""

import importlib
import pkgutil

import pytest

import ebms

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(ebms.__path__, prefix="ebms.")
    if m.ispkg or not m.name.rsplit(".", 1)[-1].startswith("_")
)


@pytest.mark.parametrize("module", MODULES)
def test_every_all_name_is_importable_and_sorted_without_duplicates(module):
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", [])
    assert len(names) == len(set(names)), f"{module}: duplicate names in __all__"
    for name in names:
        assert hasattr(mod, name), f"{module}.{name} in __all__ but missing"


def test_version_is_single_sourced():
    from importlib.metadata import version

    assert version("ebms") == ebms.__version__
