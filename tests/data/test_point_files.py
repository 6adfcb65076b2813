"""User point files: formats, the seeded split, bounds and refusals."""

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from ebms.data import load_points, read_points


def _x(n=50, d=3):
    return np.random.default_rng(1).normal(size=(n, d)).astype("float32")


def test_every_format_reads_the_same_points(tmp_path):
    x = _x()
    np.save(tmp_path / "a.npy", x)
    save_file({"pts": x}, str(tmp_path / "a.safetensors"))
    np.savetxt(tmp_path / "a.csv", x, delimiter=",", header="u,v,w", comments="")
    np.savetxt(tmp_path / "a.txt", x)
    for name in ("a.npy", "a.safetensors", "a.csv", "a.txt"):
        got = read_points(tmp_path / name)
        assert got.dtype == torch.float32 and got.shape == (50, 3), name
        torch.testing.assert_close(got, torch.from_numpy(x), atol=1e-6, rtol=1e-6)


def test_split_is_seeded_disjoint_and_complete(tmp_path):
    x = _x(101, 2)
    np.save(tmp_path / "p.npy", x)
    a, b = load_points(tmp_path / "p.npy", test_fraction=0.2, seed=3), load_points(tmp_path / "p.npy", test_fraction=0.2, seed=3)
    c = load_points(tmp_path / "p.npy", test_fraction=0.2, seed=4)
    assert torch.equal(a.test, b.test) and not torch.equal(a.test, c.test)
    assert a.test.shape == (20, 2) and a.train.shape == (81, 2)
    both = torch.cat([a.train, a.test])
    assert torch.equal(both[both[:, 0].argsort()], torch.from_numpy(x)[torch.from_numpy(x)[:, 0].argsort()])


def test_bounds_hold_every_point_with_a_margin(tmp_path):
    x = _x(200, 4)
    np.save(tmp_path / "p.npy", x)
    ds = load_points(tmp_path / "p.npy")
    assert ds.dim == 4 and len(ds.bounds) == 4
    for d, (lo, hi) in enumerate(ds.bounds):
        span = x[:, d].max() - x[:, d].min()
        assert lo == pytest.approx(x[:, d].min() - 0.1 * span, rel=1e-5)
        assert hi == pytest.approx(x[:, d].max() + 0.1 * span, rel=1e-5)


def test_one_dimensional_array_is_n_points_in_one_dimension(tmp_path):
    np.save(tmp_path / "p.npy", np.arange(10.0))
    assert read_points(tmp_path / "p.npy").shape == (10, 1)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: np.save(p / "x.npy", np.array([[1.0, np.nan], [0.0, 1.0]])), r"expected a finite tensor; got 1 NaN"),
        (lambda p: np.save(p / "x.npy", np.zeros((2, 2, 2))), r"expected points of shape \(N, D\) with N >= 2; got shape \(2, 2, 2\)"),
        (lambda p: np.save(p / "x.npy", np.array([{"a": 1}], dtype=object)), r"not a plain numeric .npy array"),
        (lambda p: save_file({"a": _x(), "b": _x()}, str(p / "x.safetensors")), r"holds tensors \['a', 'b'\]; name one with key"),
    ],
    ids=["nan", "three-dims", "pickled-object", "two-tensors"],
)
def test_bad_files_are_refused_with_a_reason(tmp_path, make, match):
    make(tmp_path)
    path = next(tmp_path.iterdir())
    with pytest.raises(ValueError, match=match):
        read_points(path)


def test_missing_file_and_bad_fraction(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"path: file .* not found"):
        read_points(tmp_path / "nope.npy")
    np.save(tmp_path / "p.npy", _x())
    with pytest.raises(ValueError, match=r"test_fraction: expected a number in \(0, 1\); got 1.0"):
        load_points(tmp_path / "p.npy", test_fraction=1.0)
