"""Checkpoints: round trip, verification errors, atomicity under interrupted writes, no pickle."""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from _train_helpers import GaussianML, NoisyNCE, make_trainer

from ebms.nets import GaussianEnergy
from ebms.train import CheckpointStore, checkpoint
from ebms.train._state import flatten_state, unflatten_state


def _save(store: CheckpointStore, step: int) -> Path:
    return store.save(step, {"model/w": torch.full((3,), float(step)), "model/n": torch.tensor(step)}, {"note": f"s{step}"})


def _weights(record: Path) -> Path:
    return record.parent / json.loads(record.read_text())["weights"]["file"]


# ----------------------------------------------------------------------------- round trip


def test_store_round_trip_and_latest_pointer(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    _save(store, 1)
    path = _save(store, 2)
    assert store.latest() == path and path.name == "ckpt-000000002.json"
    ckpt = store.load()
    assert ckpt.step == 2 and ckpt.meta["note"] == "s2"
    assert torch.equal(ckpt.tensors["model/w"], torch.full((3,), 2.0))
    assert store.load(1).meta["note"] == "s1"
    assert store.load(str(path)).step == 2


def test_keep_limits_checkpoints_and_removes_unreferenced_weights(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for s in range(1, 5):
        _save(store, s)
    assert [p.name for p in store.checkpoints()] == ["ckpt-000000003.json", "ckpt-000000004.json"]
    assert sorted(p.name[:14] for p in tmp_path.glob("*.safetensors")) == ["ckpt-000000003", "ckpt-000000004"]


def test_state_tree_round_trip_keeps_python_types(tmp_path: Path) -> None:
    tree = {
        "optimizer": {"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"betas": (0.9, 0.99), "eps": math.inf, "params": [0]}]},
        "flag": None,
    }
    skeleton, tensors = flatten_state(tree, "")
    assert set(tensors) == {"optimizer/state/0/step"}
    back = unflatten_state(json.loads(json.dumps(skeleton, allow_nan=False)), tensors, "here")
    assert back["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.99)
    assert back["optimizer"]["param_groups"][0]["eps"] == math.inf
    assert list(back["optimizer"]["state"]) == [0] and back["flag"] is None
    with pytest.raises(TypeError, match=r"x/y: cannot store a set in a checkpoint"):
        flatten_state({"y": {1}}, "x")


def test_trainer_checkpoint_uses_prefixed_keys_in_one_file(tmp_path: Path) -> None:
    make_trainer(NoisyNCE(), tmp_path, steps=10).fit()
    record = json.loads((tmp_path / "checkpoints" / "ckpt-000000010.json").read_text())
    keys = record["weights"]["keys"]
    assert {"model/mean", "model/raw_factor", "objective/log_z", "objective/memory"} <= set(keys)
    assert any(k.startswith("optimizer/state/") for k in keys)
    assert len(list((tmp_path / "checkpoints").glob("*.safetensors"))) == 1
    assert set(record["rng"][0]) == {"generator", "torch_cpu", "python", "numpy"}
    assert record["trainer"]["step"] == 10 and record["config"]["batch_size"] == 16


# ----------------------------------------------------------------------------- verification errors


def test_truncated_weights_are_reported(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    w = _weights(_save(store, 1))
    w.write_bytes(w.read_bytes()[:-10])
    with pytest.raises(ValueError, match=rf"{w.name}: file is truncated: expected \d+ bytes, found \d+"):
        store.load()


def test_tampered_weights_fail_the_hash_check(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    w = _weights(_save(store, 1))
    data = bytearray(w.read_bytes())
    data[-1] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"{w.name}: sha256 mismatch: recorded [0-9a-f]{{64}}, computed [0-9a-f]{{64}}"):
        store.load()


def test_missing_json_record_is_reported(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    path = _save(store, 1)
    path.unlink()
    with pytest.raises(ValueError, match=r"ckpt-000000001.json: checkpoint record \(JSON\) is missing"):
        store.load()


def test_truncated_json_and_missing_weights_are_reported(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    path = _save(store, 1)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=r"ckpt-000000001.json: not valid JSON \(truncated or corrupted\?\)"):
        store.load()
    path.write_text(text)
    _weights(path).unlink()
    with pytest.raises(ValueError, match=r"\.safetensors: weights file named by ckpt-000000001.json is missing"):
        store.load()


def test_invalid_safetensors_and_key_mismatch_are_reported(tmp_path: Path) -> None:
    import hashlib

    store = CheckpointStore(tmp_path)
    path = _save(store, 1)
    record = json.loads(path.read_text())
    garbage = b"\x10" + b"\x00" * 7 + b"not a header!!!!"
    _weights(path).write_bytes(garbage)
    record["weights"].update(sha256=hashlib.sha256(garbage).hexdigest(), bytes=len(garbage))
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"not a valid safetensors file"):
        store.load()
    path2 = _save(store, 2)
    record = json.loads(path2.read_text())
    record["weights"]["keys"] = ["model/w", "model/other"]
    path2.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"keys differ from ckpt-000000002.json: missing \['model/other'\], unexpected \['model/n'\]"):
        store.load()


def test_pointer_and_argument_errors(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    with pytest.raises(ValueError, match=r"no checkpoint \('latest' pointer not found\)$"):
        store.load()
    _save(store, 1)
    (tmp_path / "latest").unlink()
    with pytest.raises(ValueError, match=r"records present: \['ckpt-000000001.json'\] \(pass one explicitly\)"):
        store.load()
    with pytest.raises(ValueError, match=r"which: expected a checkpoint .json record; got 'x.safetensors'"):
        store.load("x.safetensors")
    with pytest.raises(ValueError, match=r"meta: keys \['step'\] are reserved"):
        store.save(3, {}, {"step": 1})
    with pytest.raises(ValueError, match=r"meta: expected strict JSON \(no NaN/Inf"):
        store.save(3, {}, {"x": math.nan})
    with pytest.raises(ValueError, match=r"keep: expected an int >= 1; got 0"):
        CheckpointStore(tmp_path, keep=0)


def test_restore_into_a_different_model_names_the_mismatch(tmp_path: Path) -> None:
    make_trainer(GaussianML(), tmp_path, steps=10).fit()
    with pytest.raises(ValueError, match=r"ckpt-000000010.json: model.mean: shape mismatch: checkpoint has \(2,\), current model has \(3,\)"):
        make_trainer(GaussianML(), tmp_path, model=GaussianEnergy(3), data=torch.zeros(64, 3)).restore()
    with pytest.raises(ValueError, match=r"objective state does not match: missing keys \['log_z', 'memory'\], unexpected keys \['offset'\]"):
        make_trainer(NoisyNCE(), tmp_path).restore()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r.pop("config"), r"malformed record: missing field 'config'"),
        (lambda r: r["rng"][0].update(generator="%%%"), r"RNG state is not valid base64"),
        (lambda r: r["rng"][0].update(generator="AAAA"), r"RNG state is malformed"),
        (lambda r: r["rng"].append({}), r"expected RNG states for 1 rank\(s\)"),
        (lambda r: r["trainer"]["data"].update(index=99), r"data position: expected epoch >= 0 and 0 <= index < 4"),
        (lambda r: r["state"]["model"].update(mean={"__tensor__": "model/gone"}), r"missing tensor key 'model/gone'"),
    ],
)
def test_malformed_record_fields_are_reported(tmp_path: Path, edit, message: str) -> None:
    make_trainer(GaussianML(), tmp_path, steps=10).fit()
    path = tmp_path / "checkpoints" / "ckpt-000000010.json"
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"ckpt-000000010.json: " + message):
        make_trainer(GaussianML(), tmp_path).restore()


def test_bad_pointer_content_is_reported(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    _save(store, 1)
    (tmp_path / "latest").write_text("../../etc/passwd\n")
    with pytest.raises(ValueError, match=r"latest: expected the name of a checkpoint JSON; got '../../etc/passwd'"):
        store.load()


def test_loading_never_unpickles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_trainer(NoisyNCE(), tmp_path, steps=10).fit()

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("unpickling during checkpoint load")

    for mod, name in ((pickle, "load"), (pickle, "loads"), (torch, "load")):
        monkeypatch.setattr(mod, name, forbidden)
    t = make_trainer(NoisyNCE(), tmp_path, steps=20)
    t.restore()
    assert t.step == 10


# ----------------------------------------------------------------------------- interrupted writes


@pytest.mark.parametrize("phase", ["weights", "record"])
def test_exception_during_write_keeps_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: str) -> None:
    store = CheckpointStore(tmp_path)
    _save(store, 1)
    real = checkpoint._atomic_write

    def failing(path: Path, data: bytes) -> None:
        if (phase == "weights") == path.name.endswith(".safetensors"):
            with open(path.with_name(f".{path.name}.partial.tmp"), "wb") as f:
                f.write(data[: len(data) // 2])
            raise OSError("disk full")
        real(path, data)

    monkeypatch.setattr(checkpoint, "_atomic_write", failing)
    with pytest.raises(OSError, match="disk full"):
        _save(store, 2)
    assert store.latest() == tmp_path / "ckpt-000000001.json"
    assert store.load().meta["note"] == "s1"
    monkeypatch.setattr(checkpoint, "_atomic_write", real)
    _save(store, 3)  # the next good save cleans the debris
    assert not list(tmp_path.glob(".*.tmp"))
    assert sorted(p.name[:14] for p in tmp_path.glob("*.safetensors")) == ["ckpt-000000001", "ckpt-000000003"]


def test_atomic_write_removes_its_temp_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")

    def boom(fd: int) -> None:
        raise OSError("fsync failed")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="fsync failed"):
        checkpoint._atomic_write(target, b"new")
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.bin"]


KILL_SCRIPT = textwrap.dedent(
    """
    import os, sys, time, torch
    from ebms.train import CheckpointStore
    folder, block_at = sys.argv[1], int(sys.argv[2])
    store = CheckpointStore(folder)
    store.save(1, {"w": torch.ones(1000)}, {"note": "good"})
    real, calls = os.fsync, [0]
    def slow_fsync(fd):
        calls[0] += 1
        if calls[0] == block_at:   # 1: weights temp file, 2: JSON temp file
            print("BLOCKED", flush=True)
            time.sleep(120)
        real(fd)
    os.fsync = slow_fsync
    store.save(2, {"w": torch.zeros(1000)}, {"note": "new"})
    """
)


@pytest.mark.parametrize("block_at", [1, 3])
def test_killed_writer_leaves_last_good_checkpoint(tmp_path: Path, block_at: int) -> None:
    # block_at=1: killed while the weights temp file is written;
    # block_at=3: killed while the JSON temp file is written (weights already in place;
    # fsync call 2 is the folder after the weights rename)
    script = tmp_path / "writer.py"
    script.write_text(KILL_SCRIPT)
    folder = tmp_path / "ck"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(folder), str(block_at)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "BLOCKED"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    store = CheckpointStore(folder)
    assert list(folder.glob(".*.tmp"))  # the interrupted temp file is still there
    assert store.latest() == folder / "ckpt-000000001.json"
    ckpt = store.load()
    assert ckpt.meta["note"] == "good" and torch.equal(ckpt.tensors["w"], torch.ones(1000))
