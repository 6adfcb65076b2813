"""Speed of the discrete TRF's AugSA iteration at PTB scale: the feature tables side by side, and the C++ anchor.

Workload (issue 24, section 1; the source's PTB recipe ``g4_w_c_ws_cs_wsh_csh_tied`` as
``benchmarks/repro_trf_ptb.py`` builds it):
    data        Penn Treebank training sentences (``ebms.data.text.ptb``, 42,068 sentences), the
                training words as vocabulary (``Vocabulary.build``: 10,000 ids).
    model       ``TRF`` over ``DiscreteFeatures`` of the groups w, c, ws, cs, wsh, csh, tied at order 4,
                read over ``<s> x </s>`` (``eos=True``) as the source's tables (``boundaries="source"``), kept by the source's count cutoffs
                (``source_cutoffs``: word 4-grams and word skip features seen at least twice;
                ``--cutoffs none`` keeps every observed feature), 200 exchange word classes (``WordClasses.fit``,
                10 passes), lengths 1..L (L the longest PTB train/test sentence) with add-one ``pi``;
                zero initial weights, so ``zeta_l = l log(V - 1)`` (the TRF's default) is exact at the start.
    training    ``AugSA`` with 100 persistent chains of ``TransDimensional`` (unigram and class proposals,
                one trial, one sweep per iteration), ``zeta`` gain ``SAGain(0, 0.6, 2000)`` and the exact
                ``log Z_1`` anchor; the data term the whole training set's feature means (``AugSA(data_mean=)``;
                batches of 100 training sentences only start the chains); the weights move by ``ScaledSGD``
                (the source's update: gradient over each feature's within-length variance, L2 4e-5, each
                step clipped to +-1 with the rate inside, rate ``SAGain(3000, 0, 2000)``).
    timed       one AugSA iteration = sampling (one jump + one sweep on every chain, ``log Z_1`` anchor,
                whole-sentence energies of the samples) + backward + the optimizer's step.
                Setup (data, classes, features, variances, tables) is not timed. ``--warmup`` untimed then
                ``--steps`` timed iterations per implementation, in chunks of ``--chunk`` that alternate
                between the implementations (the order rotating every round), all in one process.

Figures, per implementation:
    iterations/s      timed iterations over their wall time.
    CPU-s/iteration   process CPU time (all threads) per iteration: the figure comparable with the C++
                      anchor's 8.9 CPU-s per iteration (the source's SPMILM trainer, one thread, measured on
                      this machine; issue 24).
    positions/s       token positions the sampler moves per second of wall time: each iteration visits, on
                      every chain, the position of its length jump and each of the sentence's positions once
                      in the sweep, so one iteration is ``C + sum of the chain lengths after the jump``
                      positions; every visited position scores the members of two word classes.
    peak RSS          of the process (``ru_maxrss``; both implementations' models are alive together in a
                      side-by-side run), the peak during the timed steps (``VmHWM`` reset before them), and
                      the bytes held by each model (parameters, buffers, optimizer state).

Feature tables. When ``src/ebms/models/trf/_table.py`` provides ``ProbeTable`` (the previous
open-addressing table with its linear-probing loop) and ``BucketTable`` (a fixed-probe table) and
``DiscreteFeatures`` holds ``self.table``, both run on identically built models (same keys, seed and
batches; the old model gets ``feats.table = ProbeTable(feats.keys)`` and ``feats._context_logits =
False``, i.e. the implementation before issue 24: linear probing and one lookup per candidate in
``token_logits``; ``--reference-logits`` keeps ``BucketTable`` in both, so only the context index of
``token_logits`` differs), and the record holds the
ratio old / new of CPU time per iteration (also per position, robust to the chains drifting apart).
The old model also scores class members as a padded block (``PaddedTransDimensional``) in one
process with the sequential sweep (one call per position); the new one uses the flat route, ``--groups``
chain blocks on ``--workers`` processes (default 2 and 2, the recipe's) and the sweep order ``--scan``
(default ``colored``, the recipe's: the positions 10 or more apart moved in one call; ``sequential``
times the new code with the old order), so the trajectories differ (all exact samplers of the same law).
With ``--scan colored`` a third implementation, ``new_sequential`` (the new code with the sequential sweep,
unless ``--no-scan-pair``), alternates with the other two, and the record holds the ratio
``sequential_over_colored``: the sweep order's own share of the speed-up. Otherwise only the current implementation runs,
and one line says so. Ratios are the robust figure on this shared machine; absolute rates depend on
its load (the record states CPU, threads and load).

State (``--state CKPT``). By default both implementations start at the recipe's zero weights, and a few
steps later their chains are nearly unigram noise: few of their contexts are observed features, so
the context index finds little to read. A trained model's chains look like text, find many more
contexts (and longer lists), and cost more per position: the iteration rate of a real run falls
after its first thousand steps. ``--state`` starts both implementations from a checkpoint of
``ebms train trf-ptb`` (weights, log Z, chains and the gain schedule's step), so the figures are
those of training at that point; its record is ``trf_speed_trained``, with the checkpoint in its
settings.

Profile (``--profile``): ``--profile-steps`` further iterations of each implementation with timers
wrapped around the feature code (the lookup, window-key construction, token substitution, weight
sums) and around the contexts (the sampler's ``init``/``step``, ``log Z_1``, the rest of AugSA, the
backward pass, the optimizer). Each wrapped call's *self* time goes to (innermost context, operation),
which partitions the iteration's wall time; the figures give the shares of the six parts of the
issue (lookup, window keys, the sampler's other work, whole-sentence energies, log Z_1, optimizer)
plus the backward pass and the rest, and the inclusive share of each context.

``--cpp-binary PATH``: also run a user-built SPMILM trainer (``--cpp-args``, the iteration count
``--cpp-iters``) and report its CPU-s per iteration; a missing binary is one line, not an error.
``--quick``: 500 sentences, 20 classes, 10 chains, batch 10, 1 + 2 steps: the same code path in
seconds (no record). Run: ``benchmarks/slot.sh .venv/bin/python benchmarks/trf_speed.py [--profile]``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import resource
import shlex
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import median
from typing import Any

import _common as C
import torch
from _record import Recorder, peak_rss_mb
from torch import Tensor

import ebms.objectives.trf_augsa as augsa_module
from ebms.data.text import Vocabulary, ptb
from ebms.models.trf import (
    TEMPLATE_GROUPS,
    TRF,
    DiscreteFeatures,
    WordClasses,
    feature_moments,
    feature_templates,
    source_cutoffs,
)
from ebms.objectives import AugSA, SAGain
from ebms.samplers.trans_dimensional import TransDimensional
from ebms.train import ScaledSGD

BENCH = "trf_speed"
GROUPS = ("w", "c", "ws", "cs", "wsh", "csh", "tied")
CPP_CPU_S_PER_ITER = 8.9  # issue 24: SPMILM's trainer at PTB scale, one thread, this machine
WEIGHT_GAIN = SAGain(3000.0, 0.0, 2000)
ZETA_GAIN = SAGain(0.0, 0.6, 2000)  # the recipe's "-gamma-zeta 0,0.6" with t0 2000
L2 = 4e-5
PARTS = ("lookup", "window_keys", "sampler_other", "sentence_energies", "backward", "log_z1", "optimizer", "rest")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=int, default=None, help="timed AugSA iterations per implementation (20; quick 2)")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations first (5; quick 1)")
    p.add_argument("--chunk", type=int, default=5, help="iterations in a row before switching implementation")
    p.add_argument("--profile", action="store_true", help="also attribute the wall time of a few iterations")
    p.add_argument("--profile-steps", type=int, default=3, help="iterations profiled per implementation")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpp-binary", default="", help="a built SPMILM trainer to time live (optional)")
    p.add_argument("--cpp-args", default="", help="its arguments (one string, shell-split)")
    p.add_argument("--cpp-iters", type=int, default=0, help="AugSA iterations the C++ command runs")
    p.add_argument("--cutoffs", choices=("source", "none"), default="source",
                   help="feature count cutoffs: the source's per group (default) or none (every observed feature)")
    p.add_argument("--groups", type=int, default=2, help="new: chain blocks (the recipe's trf.chain_groups)")
    p.add_argument("--workers", type=int, default=2, help="new: processes stepping them (trf.workers)")
    p.add_argument("--scan", choices=("colored", "sequential"), default="colored",
                   help="new: the within-length sweep's order (trf.scan; the old implementation: sequential)")
    p.add_argument("--no-scan-pair", action="store_true",
                   help="with --scan colored, do not also time the new code with the sequential sweep")
    p.add_argument("--state", default="",
                   help="a checkpoint (.safetensors) of an `ebms train trf-ptb` run: both implementations start "
                        "from its weights, log Z and chains (the steady state of training) instead of zero weights")
    p.add_argument("--reference-logits", action="store_true",
                   help="old = BucketTable with per-candidate token_logits (default old: ProbeTable with them, "
                        "the implementation before issue 24); new = BucketTable with the context index")


# -- setup (not timed) ------------------------------------------------------------------------
def build(quick: bool, log: Callable[[str], None], cutoffs: str = "source") -> dict[str, Any]:
    """Data, classes, observed feature keys and variances, shared by every implementation."""
    assert set(GROUPS) <= set(TEMPLATE_GROUPS), f"template groups {GROUPS} not all in {TEMPLATE_GROUPS}"
    t0 = time.perf_counter()
    train_words, test_words = ptb("train"), ptb("test")
    if quick:
        train_words, test_words = train_words[:500], test_words[:50]
    vocab = Vocabulary.build(train_words)
    train, test, V = vocab.encode(train_words), vocab.encode(test_words), len(vocab)
    t1 = time.perf_counter()
    n_classes = 20 if quick else 200
    classes = WordClasses.fit(train, V, n_classes).classes
    t2 = time.perf_counter()
    templates = feature_templates(GROUPS, 4)
    min_count = source_cutoffs(templates) if cutoffs == "source" else 1
    feats = DiscreteFeatures.fit(train, V, templates, classes=classes, eos=True, boundaries="source",
                                 min_count=min_count)
    t3 = time.perf_counter()
    mean, variance = feature_moments(feats, train)
    t4 = time.perf_counter()
    L = max(int(train.lengths.max()), int(test.lengths.max()))
    counts = torch.bincount(train.tokens[train.mask()], minlength=V).double() + 1.0
    counts[0] = 0.0
    log(f"[{BENCH}] V = {V}, {n_classes} classes, {feats.num_features} features, L = {L}; data {t1 - t0:.1f} s, "
        f"classes {t2 - t1:.1f} s, features {t3 - t2:.1f} s, variances {t4 - t3:.1f} s")
    return {"train": train, "V": V, "L": L, "classes": classes, "templates": templates, "keys": feats.keys.clone(),
            "variance": variance, "mean": mean, "unigram": counts / counts.sum(), "n_classes": n_classes,
            "features": feats.num_features,
            "pi": torch.bincount(train.lengths, minlength=L + 1)[1:].double() + 1.0,
            "setup_s": {"data": t1 - t0, "classes": t2 - t1, "features": t3 - t2, "variances": t4 - t3}}


def table_module() -> tuple[Any, str]:
    """``ebms.models.trf._table`` when it offers both tables, else ``None`` and the reason (one line)."""
    name = "ebms.models.trf._table"
    try:
        mod = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            return None, f"{name} failed to import ({exc}): timing the current implementation only"
        return None, "src/ebms/models/trf/_table.py does not exist yet: timing the current implementation only"
    except Exception as exc:  # a module being written: report it, time what works
        return None, f"{name} failed to import ({type(exc).__name__}: {exc}): timing the current implementation only"
    missing = [c for c in ("ProbeTable", "BucketTable") if not hasattr(mod, c)]
    if missing:
        return None, f"{name} lacks {', '.join(missing)}: timing the current implementation only"
    return mod, ""


class PaddedTransDimensional(TransDimensional):
    """The sampler before the flat route: class members scored as a padded ``(B, G, K)`` block."""

    def _trials(self, fn: Any, tl: Any, *args: Any) -> Any:  # type: ignore[override]
        return super()._trials(fn, (tl[0], None), *args)


class Run:
    """One implementation's model, chains, optimizer and generators, stepped one AugSA iteration at a time."""

    def __init__(self, s: dict[str, Any], *, chains: int, batch: int, seed: int, table: Any = None,
                 padded: bool = False, groups: int = 1, workers: int = 1, scan: str = "sequential") -> None:
        self.feats = DiscreteFeatures(s["templates"], s["keys"], s["V"], classes=s["classes"], eos=True,
                                      boundaries="source")
        self.native_table = getattr(self.feats, "table", None)  # None: DiscreteFeatures has no swappable table
        if table is not None and self.native_table is not None and type(self.native_table) is not table:
            self.feats.table = table(self.feats.keys)
        self.trf = TRF(self.feats, s["pi"], s["V"])
        kind = PaddedTransDimensional if padded else TransDimensional
        self.sampler = kind(token_probs=s["unigram"], classes=s["classes"], sweeps=1, groups=groups, workers=workers,
                            scan=scan)
        # the recipe's update: the whole training set's data term (trf.feature_scaling)
        self.objective = AugSA(self.sampler, chains=chains, zeta_gain=ZETA_GAIN, data_mean=s["mean"])
        self.opt = ScaledSGD(self.feats.parameters(), lr=WEIGHT_GAIN(0), scales={self.feats.weight: s["variance"]},
                             l2=L2, clip=1.0)
        self.train, self.batch, self.chains = s["train"], batch, chains
        self.g_data = torch.Generator().manual_seed(seed)  # batches: the same for every implementation
        self.g_chain = torch.Generator().manual_seed(seed + 1)
        self.perm, self.at, self.t = torch.randperm(self.train.batch_size, generator=self.g_data), 0, 0
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.positions: list[int] = []

    def load(self, state: dict[str, Tensor]) -> None:
        """Weights, log Z and chains of a training checkpoint (its features must be this run's)."""
        model = {k[len("model/"):]: v for k, v in state.items() if k.startswith("model/")}
        if not torch.equal(model.get("field.keys", torch.zeros(0)), self.feats.keys):
            raise SystemExit("--state: its features are not this benchmark's (another recipe, --cutoffs or --quick?); "
                             "pass a checkpoint of `ebms train trf-ptb` at the recipe's settings")
        with torch.no_grad():
            self.feats.weight.copy_(model["field.weight"])
            self.trf.log_z.copy_(model["log_z"])
        self.objective.load_state_dict({k[len("objective/"):]: v for k, v in state.items()
                                        if k.startswith("objective/")})
        self.t = int(state["objective/step"])

    def step(self, prof: Attribution | None = None) -> int:
        """One AugSA iteration; returns the positions the sampler visited."""
        region = prof.region if prof is not None else _no_region
        if self.at + self.batch > self.perm.numel():
            self.perm, self.at = torch.randperm(self.train.batch_size, generator=self.g_data), 0
        x = self.train[self.perm[self.at:self.at + self.batch]].canonical()
        self.at += self.batch
        out = self.objective(self.trf, x, generator=self.g_chain)
        with region("optimizer"):
            self.opt.zero_grad()
        with region("backward"):
            out.loss.backward()
        with region("optimizer"):
            self.opt.param_groups[0]["lr"] = WEIGHT_GAIN(self.t)
            self.opt.step()
        self.t += 1
        return int(self.objective.chain_lengths.sum()) + self.chains

    def cpu_time(self) -> float:
        """CPU seconds of this process and of the sampler's worker processes (``/proc``; Linux)."""
        pool, total = getattr(self.sampler, "_pool", None), time.process_time()
        for proc in (pool.procs if pool is not None else []):
            try:
                fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, IndexError, ValueError):
                pass
        return total

    def timed(self, n: int) -> None:
        for _ in range(n):
            w0, c0 = time.perf_counter(), self.cpu_time()
            pos = self.step()
            self.wall.append(time.perf_counter() - w0)
            self.cpu.append(self.cpu_time() - c0)
            self.positions.append(pos)

    def nbytes(self) -> int:
        mods = sum(t.numel() * t.element_size() for t in [*self.trf.parameters(), *self.trf.buffers()])
        state = sum(v.numel() * v.element_size() for st in self.opt.state.values() for v in st.values()
                    if isinstance(v, torch.Tensor))
        return mods + state

    def summary(self) -> dict[str, Any]:
        wall, cpu, pos = sum(self.wall), sum(self.cpu), sum(self.positions)
        table = getattr(self.feats, "table", None)
        name = "features.py probe loop" if table is None else type(table).__name__
        if not getattr(self.feats, "_context_logits", True):
            name += " (per-candidate token_logits)"
        return {"table": name,
                "iterations": len(self.wall), "iterations_per_s": len(self.wall) / wall,
                "cpu_s_per_iteration": cpu / len(self.cpu), "wall_s_per_iteration": wall / len(self.wall),
                "median_wall_s_per_iteration": median(self.wall), "positions_per_iteration": pos / len(self.wall),
                "positions_per_s": pos / wall, "cpu_us_per_position": 1e6 * cpu / pos,
                "model_mb": round(self.nbytes() / 2**20, 1),
                "table_mb": _table_mb(table), "all_wall_s": self.wall, "all_cpu_s": self.cpu}


def _table_mb(table: Any) -> float | None:
    """Bytes the feature table holds (its ``nbytes``, a property or a method), in MB."""
    nb = getattr(table, "nbytes", None)
    nb = nb() if callable(nb) else nb
    return None if nb is None else round(int(nb) / 2**20, 1)


@contextmanager
def _no_region(name: str) -> Iterator[None]:
    yield


# -- profile ---------------------------------------------------------------------------------
class Attribution:
    """Self time of wrapped calls, keyed by (context path, operation); see the module docstring.

    A context path joins the enclosing contexts, outermost first (``augsa/sampler/energy``: a
    whole-sentence energy the sampler asked for); an operation's self time goes to the path of the
    contexts around it, a context's own time to ``(path, "other")``.
    """

    OPS = {"_lookup": "lookup", "_window_keys": "window_keys", "token_logits": "subst_keys", "_sum": "weight_sum"}

    def __init__(self) -> None:
        self.stack: list[list[Any]] = []  # [kind, name, start, child time]
        self.self_s: dict[tuple[str, str], float] = defaultdict(float)
        self.patched: list[tuple[Any, str, Any]] = []
        self.wrapped: list[str] = []

    def _enter(self, kind: str, name: str) -> None:
        self.stack.append([kind, name, time.perf_counter(), 0.0])

    def _exit(self) -> None:
        kind, name, start, child = self.stack.pop()
        total = time.perf_counter() - start
        path = "/".join([f[1] for f in self.stack if f[0] == "ctx"] + ([name] if kind == "ctx" else [])) or "loop"
        self.self_s[(path, "other" if kind == "ctx" else name)] += total - child
        if self.stack:
            self.stack[-1][3] += total

    @contextmanager
    def region(self, name: str) -> Iterator[None]:
        self._enter("ctx", name)
        try:
            yield
        finally:
            self._exit()

    def wrap(self, owner: Any, attr: str, kind: str, name: str) -> None:
        orig = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
        if orig is None or not callable(orig):
            return

        @functools.wraps(orig)
        def timed(*a: Any, **k: Any) -> Any:
            self._enter(kind, name)
            try:
                return orig(*a, **k)
            finally:
                self._exit()

        setattr(owner, attr, timed)
        self.patched.append((owner, attr, orig))
        self.wrapped.append(f"{getattr(owner, '__name__', owner)}.{attr}")

    def install(self, tables: Any) -> None:
        for attr, op in self.OPS.items():
            self.wrap(DiscreteFeatures, attr, "op", op)
        if tables is not None:
            for cls in (tables.ProbeTable, tables.BucketTable):
                for attr in ("forward", "lookup", "find", "index_of"):
                    self.wrap(cls, attr, "op", "lookup")
        self.wrap(DiscreteFeatures, "forward", "ctx", "energy")
        self.wrap(TransDimensional, "step", "ctx", "sampler")
        self.wrap(TransDimensional, "init", "ctx", "sampler")
        self.wrap(AugSA, "forward", "ctx", "augsa")
        self.wrap(augsa_module, "single_token_log_z", "ctx", "log_z1")

    def remove(self) -> None:
        for owner, attr, orig in reversed(self.patched):
            setattr(owner, attr, orig)
        self.patched.clear()

    def shares(self, total: float) -> dict[str, Any]:
        """Two partitions of ``total`` seconds and the raw cells (module docstring).

        ``partition`` (by operation, the PARTS): every lookup, every window-key construction (whole
        sentences and substitutions), then the rest of each context. ``by_purpose`` (inclusive):
        the sampler's substitution scoring (``token_logits`` with its lookups), whole-sentence
        energies (every energy call but ``log Z_1``'s, with their lookups), ``log Z_1``, the
        sampler's other work, backward, optimizer, rest.
        """
        s = dict(self.self_s)
        parts = dict.fromkeys(PARTS, 0.0)
        purpose = dict.fromkeys(("substitution_scoring", "sentence_energies", "log_z1", "sampler_other", "backward",
                                 "optimizer", "rest"), 0.0)
        for (path, op), v in s.items():
            ctx = path.split("/")
            if op == "lookup":
                parts["lookup"] += v
            elif op in ("window_keys", "subst_keys"):
                parts["window_keys"] += v
            elif "log_z1" in ctx:
                parts["log_z1"] += v
            elif ctx[-1] == "energy":
                parts["sentence_energies"] += v
            elif "sampler" in ctx:
                parts["sampler_other"] += v
            else:
                parts[ctx[-1] if ctx[-1] in ("backward", "optimizer") else "rest"] += v
            if "log_z1" in ctx:
                purpose["log_z1"] += v
            elif "energy" in ctx:
                purpose["sentence_energies"] += v
            elif "sampler" in ctx:
                purpose["substitution_scoring" if op != "other" else "sampler_other"] += v
            else:
                purpose[ctx[-1] if ctx[-1] in ("backward", "optimizer") else "rest"] += v
        unattributed = max(total - sum(s.values()), 0.0)  # the loop's own work (batch selection)
        parts["rest"] += unattributed
        purpose["rest"] += unattributed
        by_path: dict[str, float] = defaultdict(float)
        for (path, _), v in s.items():
            by_path[path] += v
        return {"partition": {k: round(v / total, 4) for k, v in parts.items()},
                "by_purpose": {k: round(v / total, 4) for k, v in purpose.items()},
                "self_by_context": {k: round(v / total, 4) for k, v in sorted(by_path.items())},
                "lookup_by_context": {c: round(v / total, 4) for (c, o), v in sorted(s.items()) if o == "lookup"},
                "profiled_wall_s_per_iteration": None}


def profile(run: Run, steps: int, tables: Any) -> dict[str, Any]:
    prof = Attribution()
    prof.install(tables)
    try:
        t0 = time.perf_counter()
        for _ in range(steps):
            run.step(prof)
        total = time.perf_counter() - t0
    finally:
        prof.remove()
    out = prof.shares(total)
    out["profiled_wall_s_per_iteration"] = total / steps
    out["wrapped"] = prof.wrapped
    return out


# -- memory, C++ -------------------------------------------------------------------------------
def reset_peak() -> bool:
    """Reset this process's ``VmHWM`` (Linux ``clear_refs``); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def vm_mb(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def run_cpp(args: argparse.Namespace) -> dict[str, Any] | None:
    if not args.cpp_binary:
        return None
    path = Path(args.cpp_binary)
    if not (path.is_file() and os.access(path, os.X_OK)) or args.cpp_iters < 1:
        why = "no executable file there" if not path.is_file() or not os.access(path, os.X_OK) else "--cpp-iters not set"
        C.note(f"[{BENCH}] --cpp-binary {path}: {why}; the C++ figure is the issue's constant {CPP_CPU_S_PER_ITER}")
        return None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run([str(path), *shlex.split(args.cpp_args)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
        C.note(f"[{BENCH}] --cpp-binary {path} exited {res.returncode} ({tail}); the C++ figure is the constant")
        return None
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"command": shlex.join([str(path), *shlex.split(args.cpp_args)]), "iterations": args.cpp_iters,
            "cpu_s_per_iteration": cpu / args.cpp_iters, "wall_s": wall}


def load_state(path: str) -> dict[str, Tensor]:
    """The tensors of a training checkpoint; a missing or unreadable file is one line."""
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except (OSError, ValueError, RuntimeError) as e:  # safetensors raises SafetensorError (a RuntimeError/OSError)
        raise SystemExit(f"--state: cannot read {path} ({e}); pass a checkpoint such as "
                         "runs/trf-ptb/checkpoints/ckpt-000020000-*.safetensors") from None


# -- main --------------------------------------------------------------------------------------
def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    q = args.quick
    steps = args.steps if args.steps is not None else (2 if q else 20)
    warmup = args.warmup if args.warmup is not None else (1 if q else 5)
    chains, batch = (10, 10) if q else (100, 100)
    for name, v, lo in (("--steps", steps, 1), ("--warmup", warmup, 0), ("--chunk", args.chunk, 1),
                        ("--profile-steps", args.profile_steps, 1)):
        if v < lo:
            raise SystemExit(f"{name}: expected an int >= {lo}; got {v}")
    if args.state and not Path(args.state).is_file():
        raise SystemExit(f"--state: no file {args.state}; pass a checkpoint such as "
                         "runs/trf-ptb/checkpoints/ckpt-000020000-*.safetensors")
    settings = {"quick": q, "groups": GROUPS, "order": 4, "cutoffs": args.cutoffs, "chains": chains, "batch": batch, "sweeps": 1,
                "steps": steps, "warmup": warmup, "chunk": args.chunk, "profile_steps": args.profile_steps if
                args.profile else 0, "weight_gain": repr(WEIGHT_GAIN), "zeta_gain": repr(ZETA_GAIN), "l2": L2,
                "boundaries": "source", "new_groups": args.groups, "new_workers": args.workers, "new_scan": args.scan,
                "state": args.state or None}
    name = BENCH + ("_trained" if args.state else "")  # from a training checkpoint: its own record
    rec = Recorder(name, seeds=[args.seed], settings=settings)
    info = C.machine_info()
    torch.manual_seed(args.seed)

    s = build(q, C.note, args.cutoffs)
    settings.update(vocab=s["V"], classes=s["n_classes"], features=s["features"], max_length=s["L"],
                    train_sentences=s["train"].batch_size)
    rss_setup = vm_mb("VmRSS")
    tables, why = table_module()
    runs: dict[str, Run] = {}
    if tables is not None:
        # old: the implementation before issue 24 (linear probing, per-candidate token_logits);
        # --reference-logits: only the token_logits path differs (both BucketTable)
        old_table = tables.BucketTable if args.reference_logits else tables.ProbeTable
        probe = Run(s, chains=chains, batch=batch, seed=args.seed, table=old_table, padded=True)
        probe.feats._context_logits = False
        if probe.native_table is None:
            why = "DiscreteFeatures holds no `table` yet: timing the current implementation only"
            tables = None
            runs["current"] = probe
        else:
            runs["old"] = probe
            runs["new"] = Run(s, chains=chains, batch=batch, seed=args.seed, table=tables.BucketTable,
                              groups=args.groups, workers=args.workers, scan=args.scan)
            if args.scan == "colored" and not args.no_scan_pair:  # the sweep order's own share of the speed-up
                runs["new_sequential"] = Run(s, chains=chains, batch=batch, seed=args.seed, table=tables.BucketTable,
                                             groups=args.groups, workers=args.workers, scan="sequential")
    else:
        runs["current"] = Run(s, chains=chains, batch=batch, seed=args.seed)
    if why:
        C.note(f"[{BENCH}] {why}")
    names = list(runs)
    if args.state:
        state = load_state(args.state)
        for n in names:
            runs[n].load(state)
        C.note(f"[{BENCH}] started from {args.state} (training step {runs[names[0]].t}; mean chain length "
               f"{float(state['objective/chain_lengths'].double().mean()):.1f})")

    for n in names:
        for _ in range(warmup):
            runs[n].step()
    peak_reset = reset_peak()
    done, r = 0, 0
    while done < steps:
        k = min(args.chunk, steps - done)
        for n in names[r % len(names):] + names[: r % len(names)]:
            runs[n].timed(k)
        done, r = done + k, r + 1
    peak_timed = vm_mb("VmHWM") if peak_reset else None
    impl = {n: runs[n].summary() for n in names}

    figures: dict[str, Any] = {"implementations": {n: {k: x for k, x in v.items() if not k.startswith("all_")}
                                                   for n, v in impl.items()}}
    line: dict[str, Any] = {"bench": BENCH, "quick": q, "threads": info["threads"]}
    if "old" in runs:
        old, new = runs["old"], runs["new"]
        paired = [a / b for a, b in zip(old.cpu, new.cpu) if b > 0]
        same = bool(torch.equal(old.objective.chain_tokens, new.objective.chain_tokens)
                    and torch.equal(old.feats.weight, new.feats.weight))
        figures["old_over_new"] = {
            "cpu_per_iteration": sum(old.cpu) / sum(new.cpu), "wall_per_iteration": sum(old.wall) / sum(new.wall),
            "cpu_per_position": impl["old"]["cpu_us_per_position"] / impl["new"]["cpu_us_per_position"],
            "median_paired_cpu": median(paired), "min_paired_cpu": min(paired), "max_paired_cpu": max(paired),
            "identical_trajectories": same,
            "max_weight_difference": float((old.feats.weight - new.feats.weight).detach().abs().max())}
        line["old_over_new_cpu"] = round(figures["old_over_new"]["cpu_per_iteration"], 3)
        line["identical_trajectories"] = same
    else:
        figures["old_over_new"] = None
    if "new_sequential" in runs:
        seq, col = runs["new_sequential"], runs["new"]
        figures["sequential_over_colored"] = {
            "cpu_per_iteration": sum(seq.cpu) / sum(col.cpu), "wall_per_iteration": sum(seq.wall) / sum(col.wall),
            "cpu_per_position": impl["new_sequential"]["cpu_us_per_position"] / impl["new"]["cpu_us_per_position"]}
        line["sequential_over_colored_wall"] = round(figures["sequential_over_colored"]["wall_per_iteration"], 3)
    head = "new" if "new" in runs else "current"
    cpp = run_cpp(args)
    figures["cpp_anchor"] = {"cpu_s_per_iteration": CPP_CPU_S_PER_ITER,
                             "source": "issue 24 (SPMILM trainer, PTB scale, one thread, this machine)",
                             "anchor_over_ebms_cpu": CPP_CPU_S_PER_ITER / impl[head]["cpu_s_per_iteration"],
                             "live": cpp}
    figures["recipe_20000_hours_at_this_rate"] = 20000 * impl[head]["wall_s_per_iteration"] / 3600
    figures["memory_mb"] = {"peak_rss": peak_rss_mb(), "rss_after_setup": rss_setup, "peak_during_timed": peak_timed}
    figures["setup_s"] = {k: round(v, 1) for k, v in s["setup_s"].items()}
    if args.profile:
        figures["profile"] = {n: profile(runs[n], args.profile_steps, tables) for n in names}

    rows = [[n, v["table"], v["iterations_per_s"], v["cpu_s_per_iteration"], v["positions_per_s"], v["model_mb"],
             v["table_mb"]] for n, v in impl.items()]
    print(f"Discrete TRF AugSA iteration at PTB scale ({'+'.join(GROUPS)}, order 4, {s['n_classes']} classes, "
          f"{s['features']} features, {chains} chains, batch {batch}; {steps} timed after {warmup} warm-up, "
          f"{info['threads']} thread(s), load {info['load_avg_1min_at_start']:.2f}{', quick' if q else ''})")
    print(C.format_table(["implementation", "table", "iterations/s", "CPU-s/iteration", "positions/s", "model MB",
                          "table MB"],
                         rows))
    if figures["old_over_new"]:
        o = figures["old_over_new"]
        print(f"old / new: CPU per iteration {o['cpu_per_iteration']:.3f}, per position {o['cpu_per_position']:.3f}, "
              f"paired median {o['median_paired_cpu']:.3f}; identical trajectories: {o['identical_trajectories']}")
    if "new_sequential" in runs:
        o = figures["sequential_over_colored"]
        print(f"new with the sequential sweep / with the colored one: wall per iteration {o['wall_per_iteration']:.3f}, "
              f"CPU per iteration {o['cpu_per_iteration']:.3f}, CPU per position {o['cpu_per_position']:.3f}")
    print(f"C++ anchor {CPP_CPU_S_PER_ITER} CPU-s/iteration{' (PTB scale; this run is not)' if q else ''}: "
          f"{figures['cpp_anchor']['anchor_over_ebms_cpu']:.2f}x "
          f"the {head} implementation; recipe (20,000 iterations) at this rate "
          f"{figures['recipe_20000_hours_at_this_rate']:.2f} h; peak RSS {figures['memory_mb']['peak_rss']} MB")
    if args.profile:
        for n, p in figures["profile"].items():
            print(f"profile {n} ({p['profiled_wall_s_per_iteration']:.3f} s/iteration, share of wall): " +
                  ", ".join(f"{k} {100 * v:.1f}%" for k, v in p["partition"].items()))
            print("  by purpose (with their lookups): " + ", ".join(f"{k} {100 * v:.1f}%"
                                                                 for k, v in p["by_purpose"].items()))

    C.save_results(name, {"machine": info, "settings": settings, "implementations": impl}, enabled=not args.no_save)
    notes = " ".join(filter(None, [
        "Ratios (old/new, same process, same batches, alternating chunks) are the robust figures; absolute rates are "
        "shared-machine figures at the load stated. CPU-s per iteration is the CPU time of the process and of its "
        "sampler worker processes. old = the implementation before issue 24 (linear probing, per-candidate "
        "token_logits, class members scored as a padded block, one process); new = the current one with "
        f"{args.groups} chain blocks on {args.workers} process(es) and the {args.scan} sweep. Their trajectories "
        "differ (the flat route's draws agree with the padded route's up to rounding, chain blocks have their own "
        "random streams, and the colored sweep moves the positions in another order): "
        "both are exact samplers of the same law (tests/samplers).", why,
        "new_sequential = new with the sequential sweep (the sweep order's share of the speed-up)."
        if "new_sequential" in runs else "",
        "Peak RSS holds every implementation's model." if len(names) > 1 else ""]))
    rec.write(figures, notes=notes, enabled=not (q or args.no_save))
    line.update({"implementation": head, "iterations_per_s": round(impl[head]["iterations_per_s"], 4),
                 "cpu_s_per_iteration": round(impl[head]["cpu_s_per_iteration"], 4),
                 "positions_per_s": round(impl[head]["positions_per_s"], 1),
                 "cpp_over_ebms_cpu": round(figures["cpp_anchor"]["anchor_over_ebms_cpu"], 3),
                 "peak_rss_mb": figures["memory_mb"]["peak_rss"]})
    if args.profile:
        line["profile"] = figures["profile"][head]["partition"]
    C.emit_final_line(line)


if __name__ == "__main__":
    main()
