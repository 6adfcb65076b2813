"""CTC-CRF loss throughput relative to plain CTC on the same batch (forward + backward).

Workload (identical for every implementation): logits ``(T, B, V)`` ~ N(0, 1), float32, CPU,
B = 16, T = 150 frames (ragged input lengths uniform in [100, 150], one of length 150);
V = 11 (10 digits + blank; targets of 1-7 labels) and V = 31 (30 characters + blank; targets of
10-30 labels). Each timed call starts from the logits (``requires_grad``), applies
``log_softmax``, computes the summed loss and back-propagates to the logits:

* ``torch-ctc``: ``torch.nn.functional.ctc_loss``;
* ``ebms-ctc``: ``ebms.structured.ctc.ctc_loss`` (default ``method="auto"``: torch's fused kernel
  for the value, the exact ``d/d log_probs`` recovered from torch's backward);
* ``ebms-ctc-dp``: ``ctc_loss(..., method="dp")``, ebms's own log-space recursion differentiated
  by autograd (the route of the max / k-max semirings and second derivatives);
* ``ctc-crf-2g`` / ``ctc-crf-3g``: ``ctc_crf_loss`` with a bigram / trigram Witten-Bell den LM
  fitted on 500 random transcripts (den graph built once, outside the timing), default
  ``method="scaled"`` (hand-written forward-backward);
* ``ctc-crf-2g-arcs``: the same bigram loss with ``den_log_partition(method="arcs")``
  (log-space, autograd), the alternative the default was chosen against;
* ``ctc-crf-2g-tnum`` / ``ctc-crf-3g-tnum``: ``ctc_crf_loss(..., numerator="torch")`` (the CTC
  numerator from torch's kernel; same loss and logit gradient).

Reported: median wall time, ``rel_throughput = torch-ctc time / implementation time`` (1 = as
fast as torch's CTC; below 1 slower) and, for ``ebms-ctc``, the time ratio ``ebms / torch``
(the issue's target: at most 1.5). Before timing, ebms's CTC loss is checked against torch's and
against its own recursion (values and logit gradients), and the two den methods are checked to
agree. Only torch and ebms are needed (no ``bench`` extra). Run:
``python benchmarks/ctc_crf.py [--quick] [--threads N]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import _common as C
import _speed_record as SR
import torch
import torch.nn.functional as F

from ebms.structured.ctc import ctc_loss
from ebms.structured.ctc_crf import ctc_crf_loss, den_log_partition
from ebms.structured.den_graph import DenominatorGraph
from ebms.structured.ngram import LabelNGram

BATCH, FRAMES = 16, 150
VOCABS = {11: (1, 7), 31: (10, 30)}  # V: target length range


def workload(v: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(v)
    lo, hi = VOCABS[v]
    logits = torch.randn(FRAMES, BATCH, v, generator=g)
    il = torch.randint(100, FRAMES + 1, (BATCH,), generator=g)
    il[0] = FRAMES
    tl = torch.randint(lo, hi + 1, (BATCH,), generator=g)
    targets = torch.randint(1, v, (BATCH, hi), generator=g)
    corpus = [torch.randint(1, v, (int(torch.randint(lo, hi + 1, (1,), generator=g)),),
                            generator=g).tolist() for _ in range(500)]
    graphs = {n: DenominatorGraph.from_ngram(LabelNGram.fit(corpus, v, n)) for n in (2, 3)}
    return {"logits": logits, "il": il, "tl": tl, "targets": targets, "graphs": graphs}


def make_impls(w: dict[str, Any]) -> dict[str, Callable[[], torch.Tensor]]:
    logits, il, tl, tg, graphs = w["logits"], w["il"], w["tl"], w["targets"], w["graphs"]

    def run(loss_fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], torch.Tensor]:
        def call() -> torch.Tensor:
            x = logits.detach().requires_grad_()
            loss = loss_fn(x.log_softmax(-1))
            loss.backward()
            return loss.detach()
        return call

    def arcs(lp: torch.Tensor) -> torch.Tensor:
        den = den_log_partition(lp, il, graphs[2], method="arcs")
        return (den - ctc_loss(lp, tg, il, tl, reduction="none").neg()).sum()

    return {
        "torch-ctc": run(lambda lp: F.ctc_loss(lp, tg, il, tl, reduction="sum")),
        "ebms-ctc": run(lambda lp: ctc_loss(lp, tg, il, tl, reduction="sum")),
        "ebms-ctc-dp": run(lambda lp: ctc_loss(lp, tg, il, tl, reduction="sum", method="dp")),
        "ctc-crf-2g": run(lambda lp: ctc_crf_loss(lp, tg, il, tl, graphs[2], reduction="sum")),
        "ctc-crf-3g": run(lambda lp: ctc_crf_loss(lp, tg, il, tl, graphs[3], reduction="sum")),
        "ctc-crf-2g-arcs": run(arcs),
        "ctc-crf-2g-tnum": run(lambda lp: ctc_crf_loss(lp, tg, il, tl, graphs[2], reduction="sum",
                                                       numerator="torch")),
        "ctc-crf-3g-tnum": run(lambda lp: ctc_crf_loss(lp, tg, il, tl, graphs[3], reduction="sum",
                                                       numerator="torch")),
    }


def check_ctc(w: dict[str, Any]) -> float:
    """Largest difference between ebms's and torch's CTC (loss and logit gradient), and between
    ebms's two routes; raises if above float32 rounding."""
    logits, il, tl, tg = w["logits"], w["il"], w["tl"], w["targets"]
    out = {}
    for name, fn in (("torch", lambda lp: F.ctc_loss(lp, tg, il, tl, reduction="sum")),
                     ("auto", lambda lp: ctc_loss(lp, tg, il, tl, reduction="sum")),
                     ("dp", lambda lp: ctc_loss(lp, tg, il, tl, reduction="sum", method="dp"))):
        x = logits.detach().requires_grad_()
        loss = fn(x.log_softmax(-1))
        loss.backward()
        out[name] = (loss.detach(), x.grad)
    diff = max(max(float((out[a][0] - out["torch"][0]).abs() / out["torch"][0].abs()),
                   float((out[a][1] - out["torch"][1]).abs().max())) for a in ("auto", "dp"))
    if diff > 1e-3:  # float32: log-space rounding of |log p| ~ 300 over 150 frames
        raise RuntimeError(f"ebms CTC disagrees with torch's (largest difference {diff:.2e})")
    return diff


def bench_vocab(v: int, args: Any) -> dict[str, Any]:
    w = workload(v)
    impls = make_impls(w)
    ctc_diff = check_ctc(w)
    ref = impls["ctc-crf-2g"]()
    diff = float((ref - impls["ctc-crf-2g-arcs"]()).abs() / ref.abs().clamp_min(1.0))
    if diff > 1e-5:
        raise RuntimeError(f"V={v}: den methods disagree (relative difference {diff:.2e})")
    repeats = args.repeats or (3 if args.quick else 15)
    wall, cpu = C.time_alternating(impls, repeats=repeats, warmup=1)
    med = {n: C.median(t) for n, t in wall.items()}
    rows = {n: {"median_s": t, "all_s": wall[n], "cpu_median_s": C.median(cpu[n]),
                "rel_throughput": med["torch-ctc"] / t,
                "rel_throughput_vs_ebms_ctc": med["ebms-ctc"] / t} for n, t in med.items()}
    sizes = {n: {"states": g.n_states, "arcs": g.n_arcs} for n, g in w["graphs"].items()}
    return {"vocab": v, "graphs": sizes, "repeats": repeats, "method_check_rel_diff": diff,
            "ctc_check_max_diff": ctc_diff, "ebms_ctc_over_torch": med["ebms-ctc"] / med["torch-ctc"],
            "ebms_ctc_over_torch_cpu": C.median(cpu["ebms-ctc"]) / C.median(cpu["torch-ctc"]),
            "rows": rows}


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0])
    rec = SR.start("ctc_crf", args)
    info = C.machine_info()
    results = [bench_vocab(v, args) for v in VOCABS]
    print(f"CTC-CRF vs CTC, loss forward+backward from logits, B={BATCH}, T={FRAMES} (ragged), "
          f"float32 CPU, {info['threads']} thread(s). rel = torch-ctc time / impl time")
    header = ["V", "impl", "den states", "median ms", "rel torch-ctc", "rel ebms-ctc", "cpu ms"]
    table = []
    summary: dict[str, Any] = {"bench": "ctc_crf", "quick": args.quick, "threads": info["threads"],
                               "ratio": "torch_ctc_time / impl_time"}
    for res in results:
        v = res["vocab"]
        for n, r in res["rows"].items():
            order = 3 if "3g" in n else 2 if "2g" in n else None
            states = res["graphs"][order]["states"] if order else None
            table.append([v, n, states, 1e3 * r["median_s"], r["rel_throughput"],
                          r["rel_throughput_vs_ebms_ctc"], 1e3 * r["cpu_median_s"]])
            key = n.replace("-", "_")
            summary[f"v{v}_{key}_ms"] = round(1e3 * r["median_s"], 3)
            if n.startswith("ctc-crf"):
                summary[f"v{v}_{key}_rel_torch_ctc"] = round(r["rel_throughput"], 3)
        summary[f"v{v}_ebms_ctc_over_torch_ctc"] = round(res["ebms_ctc_over_torch"], 3)
        summary[f"v{v}_ebms_ctc_over_torch_ctc_cpu"] = round(res["ebms_ctc_over_torch_cpu"], 3)
    print(C.format_table(header, table))
    for res in results:
        print(f"V={res['vocab']}: ebms-ctc / torch-ctc time = {res['ebms_ctc_over_torch']:.2f} wall, "
              f"{res['ebms_ctc_over_torch_cpu']:.2f} cpu (target <= 1.5); ebms vs torch largest "
              f"difference {res['ctc_check_max_diff']:.1e}")
    record = {"bench": "ctc_crf", "quick": args.quick, "machine": info,
              "workload": {"batch": BATCH, "frames": FRAMES, "vocabs": list(VOCABS),
                           "target_lengths": {str(k): list(x) for k, x in VOCABS.items()},
                           "dtype": "float32", "input_lengths": "uniform in [100, 150]"},
              "results": results}
    path = C.save_results("ctc_crf", record, enabled=not args.no_save)
    SR.finish(rec, args, record, notes=(
        "Medians of the timed repeats (wall s per loss forward+backward), all implementations alternating in one process. rel_throughput = torch-ctc median / implementation median (1: as fast as torch's CTC). ebms_ctc_over_torch: ebms-ctc / torch-ctc time. Shared 2-core machine: the ratios are the robust figures."))
    if path is not None:
        C.note(f"[ctc_crf] wrote {path}")
    C.emit_final_line(summary)


if __name__ == "__main__":
    main()
