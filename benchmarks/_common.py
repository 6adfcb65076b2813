"""Shared helpers for the side-by-side benchmarks in ``benchmarks/``.

Every benchmark follows the same protocol:

* all implementations run in **one process**, on the same inputs, with the
  same number of torch threads (``--threads``, default 1: with several
  OpenMP threads on a shared machine one descheduled thread stalls the
  others and timings swing by integer factors);
* each implementation is warmed up, then timed ``repeats`` times, the order
  of implementations rotating from one repeat to the next (so drift in
  machine load hits everyone alike); the **median** is reported;
* ratios are reported as ``speedup = their_time / our_time``: above 1 means
  ``ebms`` is faster, below 1 means it is slower;
* the table goes to stdout, the full record to ``benchmarks/results/<bench>.json``,
  and the very last stdout line is one JSON object ``{"bench": ..., ...}``.

``--quick`` keeps the comparison identical and only lowers the repeat count,
so a quick run finishes in well under a minute.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def parse_args(
    description: str, add_args: Callable[[argparse.ArgumentParser], None] | None = None
) -> argparse.Namespace:
    """Common flags: ``--quick``, ``--threads``, ``--repeats``, ``--no-save``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="fewer repeats, same comparison (< 1 min)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads for every implementation (default 1: on a shared machine "
                        "several OpenMP threads wait on each other and the timings become erratic)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per implementation")
    p.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/<bench>.json")
    if add_args is not None:
        add_args(p)
    args = p.parse_args()
    if args.threads < 1:
        p.error(f"--threads: expected an int >= 1; got {args.threads}")
    if args.repeats is not None and args.repeats < 1:
        p.error(f"--repeats: expected an int >= 1; got {args.repeats}")
    torch.set_num_threads(args.threads)
    return args


def version_of(dist: str) -> str | None:
    """Installed version of a distribution, or ``None`` when absent."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_info(peers: Iterable[str] = ()) -> dict[str, Any]:
    """What the numbers were measured on (goes into the JSON record)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "ebms": version_of("ebms"),
        "peers": {p: version_of(p) for p in peers},
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "load_avg_1min_at_start": load,
    }


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_alternating(
    impls: Mapping[str, Callable[[], object]], *, repeats: int, warmup: int = 1
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and process-CPU times (seconds) of each zero-argument callable, interleaved.

    Each implementation runs ``warmup`` untimed calls, then ``repeats`` timed
    calls; in repeat ``r`` the order starts at implementation ``r mod n``.
    The garbage collector is paused while timing. Wall time is the reported
    figure; CPU time (which leaves out time the process was descheduled) is
    kept as a cross-check for runs on a busy machine.

    Returns:
        ``(wall, cpu)``, each ``{name: [seconds per repeat]}``.
    """
    names = list(impls)
    for _ in range(warmup):
        for n in names:
            impls[n]()
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for r in range(repeats):
            k = r % len(names)
            for n in names[k:] + names[:k]:
                c0 = time.process_time()
                wall[n].append(_timed(impls[n]))
                cpu[n].append(time.process_time() - c0)
    finally:
        if enabled:
            gc.enable()
    return wall, cpu


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def speedup(their_time: float, our_time: float) -> float:
    """``their / ours``: > 1 means ebms is faster."""
    return their_time / our_time


def _matmul_backends(a: torch.Tensor, b: torch.Tensor) -> dict[str, Callable[[], object]]:
    """The matrix-product routes PyTorch offers on this machine for ``a @ b``.

    ``mm`` is the default BLAS (MKL on x86 CPU builds); ``onednn`` is oneDNN's
    linear kernel, which on some CPUs uses wider vector units than MKL does.
    Machine throughput is the faster of the two, so "fraction of machine" never
    flatters an implementation that picked the faster route.
    """
    out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
    routes: dict[str, Callable[[], object]] = {"mm": lambda: torch.mm(a, b, out=out)}
    if torch.backends.mkldnn.is_available() and a.device.type == "cpu" and a.dtype == torch.float32:
        bt = b.t().contiguous()  # oneDNN linear takes the (out, in) weight
        try:  # a private op: absent or different on some torch builds, then only ``mm`` is probed
            op = torch.ops.mkldnn._linear_pointwise
            op(a[:1], bt, None, "none", [], "")
        except (AttributeError, RuntimeError, TypeError):
            return routes
        routes["onednn"] = lambda: op(a, bt, None, "none", [], "")
    return routes


def _fastest_route(a: torch.Tensor, b: torch.Tensor) -> Callable[[], object]:
    best, best_t = None, float("inf")
    for fn in _matmul_backends(a, b).values():
        fn()
        t = min(_timed(fn) for _ in range(3))
        if t < best_t:
            best, best_t = fn, t
    assert best is not None
    return best


def matmul_gflops(n: int = 1024, *, repeats: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """Measured throughput (GFLOP/s, median) of an ``n x n @ n x n`` product on this machine.

    Uses the current torch thread count and the faster of PyTorch's product
    routes (see :func:`_matmul_backends`); ``2 n^3`` FLOPs per product.
    """
    fn = _fastest_route(torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype))
    ts = [_timed(fn) for _ in range(repeats)]
    return 2.0 * n**3 / median(ts) / 1e9


def matmul_probe(n: int = 1024, reps: int = 4, *, dtype: torch.dtype = torch.float32) -> Callable[[], None]:
    """A callable doing ``reps`` products ``n x n @ n x n`` (``2 n^3 reps`` FLOPs).

    Put it in :func:`time_alternating` beside the implementations, so the
    machine throughput is measured under the same load as they are.
    """
    fn = _fastest_route(torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype))

    def run() -> None:
        for _ in range(reps):
            fn()

    return run


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table (floats shown with 4 significant digits)."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return "-" if v is None else str(v)

    body = [[cell(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line, sep, *("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body)])


def save_results(bench: str, record: Mapping[str, Any], *, enabled: bool = True) -> Path | None:
    """Write ``benchmarks/results/<bench>.json`` atomically (its folders created); returns the path."""
    if not enabled:
        return None
    path = RESULTS_DIR / f"{bench}.json"
    path.parent.mkdir(parents=True, exist_ok=True)  # a name may hold a folder ("quick/...")
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def emit_final_line(summary: Mapping[str, Any]) -> None:
    """Print the one-line JSON summary; it must be the last line on stdout."""
    sys.stdout.flush()
    print(json.dumps(dict(summary), sort_keys=False), flush=True)


def import_peer(module: str, *, extra: str = "bench") -> Any | None:
    """The peer library ``module`` (an import name, e.g. ``"ebm"`` or ``"nltk.lm"``), or ``None`` with
    one line on stderr when it cannot be imported.

    The line names the distribution (``ebmkit``, not ``ebm``: :data:`_peers.PEER_MODULES`) and says
    whether it is missing or installed but failing to import. A benchmark then reports its other rows
    and lists the peer as skipped; it never crashes for a missing peer.
    """
    import importlib

    from _peers import distribution_of, installed_version

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        dist = distribution_of(module) or module.split(".")[0]
        version = installed_version(dist)
        fix = f"pip install -e \".[{extra}]\" installs the pinned peers"
        if version is None:
            note(f"skipping {dist} (import {module}): not installed ({exc}); {fix}")
        else:
            note(f"skipping {dist} {version}: installed, but import {module} failed ({exc}); {fix}")
        return None


def logged_seconds(metrics: Path, until: int | None = None) -> float:
    """Training seconds a stopped run logged: ``elapsed_s`` restarts at every resume, so the sum over its
    segments of each one's last value (what ran after a segment's last log line is not counted). ``until``:
    up to the first line logged after that step (the time a run took to reach it, segments before included)."""
    total, last = 0.0, 0.0
    for line in metrics.read_text().splitlines() if metrics.is_file() else []:
        rec = json.loads(line)
        if until is not None and rec.get("step", 0) > until and "event" not in rec:
            break
        t = rec.get("time", {}).get("elapsed_s")
        if t is None:
            continue
        if t < last:
            total += last
        last = t
    return total + last


def note(msg: str) -> None:
    """Progress/diagnostic text (stderr, so stdout stays table + final JSON)."""
    print(msg, file=sys.stderr, flush=True)


def sequential_copy(mlp: torch.nn.Module) -> torch.nn.Sequential:
    """``Linear-SiLU-...-Linear`` holding copies of an ``ebms.nets.MLPEnergy``'s weights (SiLU MLPs).

    The peers' and the hand loop's model: the same function and the same initial
    weights as the ebms model, built from plain ``nn.Linear`` layers.
    """
    from torch import nn

    mods: list[nn.Module] = []
    for layer in mlp.layers:
        lin = nn.Linear(layer.in_features, layer.out_features)
        lin.load_state_dict(layer.state_dict())
        mods += [lin, nn.SiLU()]
    head = nn.Linear(mlp.head.in_features, 1)
    head.load_state_dict(mlp.head.state_dict())
    return nn.Sequential(*mods, head)


def fastest_peers(peers: dict[str, float], libs: dict[str, float], ours: float) -> dict[str, object]:
    """The fastest peer overall and the fastest library (median times), and ebms's speedup over each."""
    best_any = min(peers, key=peers.__getitem__) if peers else None
    best_lib = min(libs, key=libs.__getitem__) if libs else None
    return {
        "fastest_peer": best_any,
        "speedup_vs_fastest_peer": speedup(peers[best_any], ours) if best_any else None,
        "fastest_peer_library": best_lib,
        "speedup_vs_fastest_peer_library": speedup(libs[best_lib], ours) if best_lib else None,
    }
