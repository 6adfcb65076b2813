"""Test-wide settings: threads, the ``--device`` option and the fast-path switch.

Tests use tiny tensors, for which torch's intra-op threads cost more than they
save (and oversubscribe CI's 2 cores when pytest runs beside other work), so
the suite runs single-threaded; under pytest-xdist, commands the tests start
get ``OMP_NUM_THREADS`` = cores / workers. Benchmarks, the demo and user code
keep torch's default.

``--device`` (default ``cpu``) chooses where device-aware tests run: they take
the ``device`` fixture and put every tensor, module and generator they create
there. ``pytest --device cuda`` runs them on the GPU and skips them, with the
reason, when CUDA is absent (``cuda:1`` and other device strings work the same
way). Tests that do not take the fixture run on the CPU whatever the option.

``fast_paths`` is a fixture parametrised over ``"fast"`` and ``"public"``: a
test that takes it runs twice, the second time with every private-PyTorch
speed path switched off (:mod:`ebms.nets._fastpaths`). To run whole files on
the public paths, set ``EBMS_DISABLE_FAST_PATHS=1`` in the environment. The oneDNN route is
taken on every CPU in the tests (outside them only where it is the faster one).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

torch.set_num_threads(1)

# MLPEnergy and the RBMs route large float32 products to oneDNN only on CPUs where it is faster than
# MKL (AVX-512: ebms.nets._linear._onednn_faster); the suite takes that route wherever the kernel is
# usable, so it is checked on every machine the tests run on (CI's CPU may lack AVX-512).
import ebms.nets._linear as _linear  # noqa: E402

_linear._ONEDNN_FASTER = True

# Commands a test starts (examples, transcripts, CLI subprocesses) take torch's default thread
# count, one per core. Beside another pytest-xdist worker doing the same, 2 processes x 2 threads
# on 2 cores spin against each other: `ebms demo` ran 5-7 times slower (600+ s against 81 s in
# CI). Each worker's subprocesses get its share of the cores instead; a value the user set wins.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--device",
        default="cpu",
        help="device for the device-aware tests (those taking the `device` fixture): cpu (default), cuda, cuda:N",
    )


def _device_or_skip_reason(name: str) -> tuple[torch.device | None, str]:
    """The device named by ``--device``, or why the device-aware tests cannot run on it."""
    dev = torch.device(name)  # a valid name: pytest_configure checked it
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return None, f"--device {name}: CUDA is not available (torch.cuda.is_available() is False, torch {torch.__version__})"
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            return None, f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) present"
    if dev.type == "meta":
        return None, "--device meta: tensors without data cannot be checked against references"
    try:
        torch.zeros(1, device=dev) + 1
        torch.Generator(device=dev)
    except (RuntimeError, TypeError) as exc:
        return None, f"--device {name}: cannot allocate a tensor and a generator there ({exc})"
    return dev, ""


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("--device")
    try:
        torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise pytest.UsageError(f"--device: expected a torch device such as cpu, cuda or cuda:1; got {name!r} ({exc})") from None


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> torch.device:
    """The device chosen with ``--device`` (skips the test, with the reason, when it is unusable)."""
    dev, reason = _device_or_skip_reason(request.config.getoption("--device"))
    if dev is None:
        pytest.skip(reason)
    return dev


@pytest.fixture(params=["fast", "public"])
def fast_paths(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test with the private-PyTorch fast paths as detected (``fast``) and switched off (``public``)."""
    from ebms.nets._fastpaths import disabled

    if request.param == "public":
        with disabled():
            yield "public"
    else:
        yield "fast"
