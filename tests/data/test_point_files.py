"""User point files: formats, the seeded split, bounds and refusals."""

import json
import re

import numpy as np
import pytest
import torch
from _peak_memory import peak_mb
from safetensors.numpy import save_file

from ebms.data import load_points, read_points
from ebms.data.points import MAX_LINE_BYTES, MAX_POINT_BYTES
from ebms.errors import DataError, LimitExceeded


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
        (lambda p: np.save(p / "x.npy", np.array([[1.0, np.nan], [0.0, 1.0]])), r"expected finite numbers; got 1 non-finite .*first in point 0"),
        (lambda p: np.save(p / "x.npy", np.zeros((2, 2, 2))), r"expected points of shape \(N, D\) with N >= 2 .*; got shape \(2, 2, 2\)"),
        (lambda p: np.save(p / "x.npy", np.array([{"a": 1}], dtype=object)), r"not a plain numeric .npy array"),
        (lambda p: save_file({"a": _x(), "b": _x()}, str(p / "x.safetensors")), r"holds tensors \['a', 'b'\]; name one with key"),
    ],
    ids=["nan", "three-dims", "pickled-object", "two-tensors"],
)
def test_bad_files_are_refused_with_a_reason(tmp_path, make, match):
    make(tmp_path)
    path = next(tmp_path.iterdir())
    with pytest.raises(DataError, match=r"x\.(npy|safetensors).*" + match):
        read_points(path)


def test_missing_file_and_bad_fraction(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"path: file .* not found"):
        read_points(tmp_path / "nope.npy")
    np.save(tmp_path / "p.npy", _x())
    with pytest.raises(ValueError, match=r"test_fraction: expected a number in \(0, 1\); got 1.0"):
        load_points(tmp_path / "p.npy", test_fraction=1.0)


def _sparse(path, size):
    """A file of ``size`` bytes that occupies (almost) no disk: a hole made by truncate."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path




def test_one_row_csv_is_one_point_of_fifty_dimensions_and_refused(tmp_path):
    path = tmp_path / "row.csv"
    path.write_text(",".join(str(i) for i in range(50)) + "\n")
    with pytest.raises(DataError, match=r"row.csv: expected points .* got shape \(1, 50\); a single row is one "
                                        r"point of dimension 50"):
        read_points(path)
    path.write_text(",".join(str(i) for i in range(50)) + "\n" + ",".join(str(-i) for i in range(50)) + "\n")
    x = read_points(path)
    assert x.shape == (2, 50) and x[0, 49] == 49 and x[1, 49] == -49


def test_single_column_text_is_n_points_in_one_dimension(tmp_path):
    (tmp_path / "c.txt").write_text("1\n2\n3\n")
    assert torch.equal(read_points(tmp_path / "c.txt"), torch.tensor([[1.0], [2.0], [3.0]]))


def test_text_tables_stream_in_blocks_and_agree_with_loadtxt(tmp_path, monkeypatch):
    import ebms.data.points as points

    monkeypatch.setattr(points, "_LINES_PER_BLOCK", 7)  # many blocks, a short last one
    x = np.random.default_rng(2).normal(size=(53, 4))
    np.savetxt(tmp_path / "t.csv", x, delimiter=",", header="a,b,c,d", comments="")
    got = read_points(tmp_path / "t.csv")
    torch.testing.assert_close(got, torch.from_numpy(x.astype(np.float32)), atol=0, rtol=1e-6)


@pytest.mark.parametrize(
    "text, match",
    [
        ("1,2\n3,4\n5\n", r"line 3: expected 2 numbers \(as the lines before\); got 1"),
        ("1,2\n3,x\n", r"line 2: not a row of numbers"),
        ("1,2\n3,1e60\n", r"expected finite numbers; got 1 non-finite .*first in point 1"),
        ("a,b\n", r"holds no rows of numbers"),
    ],
    ids=["ragged", "word", "beyond-float32", "header-only"],
)
def test_bad_text_tables_name_the_file_and_the_line(tmp_path, text, match):
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(DataError, match=r"bad.csv.*" + match):
        read_points(tmp_path / "bad.csv")


def test_binary_bytes_in_a_csv_are_refused(tmp_path):
    (tmp_path / "b.csv").write_bytes(b"1,2\n\x00\x00\x00\n")
    with pytest.raises(DataError, match=r"b.csv: line 2 holds NUL bytes"):
        read_points(tmp_path / "b.csv")


@pytest.mark.parametrize("suffix", [".csv", ".npy", ".safetensors", ".txt"])
def test_sparse_two_gib_file_is_refused_by_the_limit_before_reading(tmp_path, suffix):
    path = _sparse(tmp_path / f"big{suffix}", 2 << 30)
    peak, err = peak_mb(lambda: read_points(path))
    assert isinstance(err, LimitExceeded), err
    msg = str(err)
    assert str(path) in msg and f"max_bytes={MAX_POINT_BYTES}" in msg
    assert "pass max_bytes=2147483648" in msg and "data.max_mb=2048" in msg
    assert peak < 1.0, peak  # nothing was read


@pytest.mark.parametrize(
    "suffix, match",
    [
        (".csv", rf"line 1 is longer than {MAX_LINE_BYTES} bytes"),
        (".txt", rf"line 1 is longer than {MAX_LINE_BYTES} bytes"),
        (".npy", r"not a .npy file \(bad header"),
        (".safetensors", r"header length 0 does not fit a file of 2147483648 bytes"),
    ],
)
def test_sparse_two_gib_file_with_the_limit_raised_fails_in_bounded_memory(tmp_path, suffix, match):
    path = _sparse(tmp_path / f"big{suffix}", 2 << 30)
    peak, err = peak_mb(lambda: read_points(path, max_bytes=4 << 30))
    assert isinstance(err, DataError) and str(path) in str(err), err
    assert re.search(match, str(err)), str(err)
    assert peak < 3 * MAX_LINE_BYTES / 2**20 + 8, peak  # one line at most, never the file


def test_npy_header_claiming_more_than_the_file_holds_is_refused_without_allocating(tmp_path):
    path = tmp_path / "lie.npy"
    np.save(path, np.zeros((4, 2)))
    raw = path.read_bytes()
    # rewrite the shape in the header: (4, 2) -> (40000000, 2), same header length
    lie = raw.replace(b"(4, 2)", b"(40000000, 2)".ljust(len(b"(4, 2)")), 1)
    if len(lie) != len(raw):  # the header is padded: take the padding back
        head_end = raw.index(b"\n") + 1
        header = raw[10:head_end].decode("latin1").replace("(4, 2), ", "(40000000, 2), ")
        header = header.rstrip("\n").rstrip(" ")
        header = header + " " * (head_end - 10 - len(header) - 1) + "\n"
        lie = raw[:10] + header.encode("latin1") + raw[head_end:]
    path.write_bytes(lie)
    peak, err = peak_mb(lambda: read_points(path))
    assert isinstance(err, DataError) and "lie.npy: truncated: header claims shape (40000000, 2)" in str(err), err
    assert peak < 1.0, peak
    with pytest.raises(LimitExceeded, match=r"lie.npy: the array its header claims, shape \(40000000, 2\) float64 is"):
        read_points(path, max_bytes=1 << 20)


def test_empty_and_garbage_npy_files_are_data_errors(tmp_path):
    np.save(tmp_path / "e.npy", np.zeros((0, 3)))
    with pytest.raises(DataError, match=r"e.npy: holds no points \(shape \(0, 3\)\)"):
        read_points(tmp_path / "e.npy")
    (tmp_path / "z.npy").write_bytes(b"")
    with pytest.raises(DataError, match=r"z.npy: not a .npy file"):
        read_points(tmp_path / "z.npy")
    (tmp_path / "g.npy").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(DataError, match=r"g.npy: not a .npy file"):
        read_points(tmp_path / "g.npy")


def _safetensors(path, header, data=b""):
    blob = json.dumps(header).encode()
    path.write_bytes(len(blob).to_bytes(8, "little") + blob + data)
    return path


@pytest.mark.parametrize(
    "header, data, match",
    [
        ({"x": {"dtype": "F32", "shape": [1000000, 3], "data_offsets": [0, 12000000]}}, b"\0" * 24,
         r"header claims shape \(1000000, 3\) F32 at bytes \[0, 12000000\); the file holds 24 bytes"),
        ({"x": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 8]}}, b"\0" * 24,
         r"header claims shape \(2, 3\) F32 at bytes \[0, 8\)"),
        ({"x": {"dtype": "STR", "shape": [2], "data_offsets": [0, 2]}}, b"ab", r"expected a numeric dtype"),
        ({"x": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]}}, b"", r"holds no points"),
        ([1, 2], b"", r"header is not a JSON object"),
    ],
    ids=["claims-more-than-file", "offsets-disagree", "string-dtype", "empty", "not-an-object"],
)
def test_lying_or_garbage_safetensors_headers_are_data_errors(tmp_path, header, data, match):
    path = _safetensors(tmp_path / "s.safetensors", header, data)
    peak, err = peak_mb(lambda: read_points(path))
    assert isinstance(err, DataError) and re.search(r"s.safetensors.*" + match, str(err)), err
    assert peak < 1.0, peak


def test_random_bytes_safetensors_is_a_data_error(tmp_path):
    path = tmp_path / "r.safetensors"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(DataError, match=r"r.safetensors: not a .safetensors file"):
        read_points(path)


def test_safetensors_reads_the_named_tensor_only(tmp_path):
    x = _x(10, 2)
    save_file({"a": x, "b": np.zeros((3, 3), dtype=np.float64)}, str(tmp_path / "two.safetensors"))
    torch.testing.assert_close(read_points(tmp_path / "two.safetensors", key="a"), torch.from_numpy(x))
    with pytest.raises(DataError, match=r"key: 'c' not in .*two.safetensors; it holds \['a', 'b'\]"):
        read_points(tmp_path / "two.safetensors", key="c")


def test_limit_applies_to_the_decoded_text_table(tmp_path):
    np.savetxt(tmp_path / "t.csv", np.ones((1000, 10)), delimiter=",", fmt="%d")  # 20 kB of text
    with pytest.raises(LimitExceeded, match=r"t.csv: the decoded table \(float32\) so far is .* above the "
                                            r"limit max_bytes=30000"):
        read_points(tmp_path / "t.csv", max_bytes=30000)  # 1000 x 10 float32 = 40000 bytes
    assert read_points(tmp_path / "t.csv", max_bytes=40000).shape == (1000, 10)
    with pytest.raises(ValueError, match=r"max_bytes: expected a number of bytes >= 1; got 0"):
        read_points(tmp_path / "t.csv", max_bytes=0)
