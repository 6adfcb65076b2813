"""Residual EBM speed: conditional NCE training and joint sampling, ebms vs a hand-written PyTorch loop.

Workload (identical inputs and models on both sides; float32, CPU, one process):
    sizes       vocabulary V = 1000, prefixes of 32 tokens, continuations of at most K = 16 tokens
                (the horizon law), energies ``TextEnergy`` of width 128 and 2 layers (4 heads),
                kinds ``"transformer"`` (bidirectional, the BIT analogue) and ``"bilstm"``.
    bases       ``TransformerLM`` (d 128, 2 layers, 4 heads, ff 512) with the transformer energy,
                ``LSTMLM`` (128/128, 2 layers) with the BiLSTM energy; untrained (speed only).
    data        256 prefixes; one positive continuation each (12 to 16 tokens); an offline
                ``NegativeCache`` of S = 8 base draws per prefix (``horizon=16``).

1. Conditional NCE training step (B = 64 prefixes, nu = 1 negative each), ``STEPS`` steps per
   timed call, each call restarting the batch stream from the same seed:
    ebms        ``idx -> ResidualNCE.pack(prefix[idx], positive[idx], cache.draw(idx, nu, g))``,
                ``ResidualNCE(nu)(model, batch)``, ``backward``, ``Adam.step`` (no Trainer);
    ebms-Trainer  the same stream and objective under ``Trainer.fit`` (``run_dir=None``,
                ``progress=False``, ``checkpoint_every=None``, the default divergence guard), a new
                Trainer per call (its set-up is counted), time divided by the steps;
    ebms-Trainer-noguard  the same with ``guard=None`` (full run only);
    hand        the same random indices into pre-joined padded ``<s> c x`` tensors (built once,
                outside the timing), trimmed to the batch's widest row, the same ``TextEnergy``'s
                layers called directly (embedding, blocks / packed LSTM, mean pool, head), the
                softplus losses written inline, the same Adam; two energy calls (positives,
                negatives), as ``ResidualNCE`` makes;
    hand-1call  the same with positives and negatives in one energy call (informative: what a
                fused call would gain; full run only).
   Figure: tokens/s = real tokens (prefix + continuation, positives and negatives, ``<s>`` not
   counted) of the ``STEPS`` batches / time.

2. Joint sampling, Algorithm 1 (P = 8 prefixes, n = 32 base draws each, top-k 10):
    ebms        ``top_k_joint_sample(model, prefix, n, top_k=10, generator=g)``;
    hand-lm.sample  the same ``lm.sample(P n, prefix=repeated prefixes, max_length=K, top_k=10,
                truncate=True)`` call, the energies of hand-joined tensors through the same layers,
                ``torch.multinomial(softmax(-E))``: the library's overhead around base sampling;
    hand-loop   a hand-written incremental loop through the LM's ``forward(inputs, state)`` (its KV
                cache / LSTM state) for exactly K - 1 steps, every row kept to the end (lengths from
                the first ``</s>``), top-k by ``topk``/``masked_fill``, ``torch.multinomial``, then the
                same energies and resampling;
    hand-loop-shared  the same loop encoding each of the P prefixes once and repeating its state
                (``state.select``) for the n draws, where ebms (``sample_base``) and the loops above
                encode all P n repeated prefixes.
   Figures: draws/s = P n scored continuations per second; picks/s = P per second.

Checks (asserted before timing): the hand NCE loss, gradients and the parameters after one Adam
step equal ebms's on the same batch; ``Trainer.fit`` for ``STEPS`` steps lands on the same
parameters as the plain ebms loop; the hand ``lm.sample`` path draws the same continuations as
``top_k_joint_sample`` and its energies equal ebms's log-weights; the hand incremental loop's
per-step log-probabilities equal the LM's teacher-forced ones on its own draws. Resampling picks
differ by construction (ebms: inverse CDF; hand: ``torch.multinomial``).

Protocol: ``_common.time_alternating`` (warm-up, rotating order, medians); speedup = hand median
time / ebms median time (> 1: ebms faster). ``--quick``: 3 repeats instead of 9, no warm-up call
(the checks have run every path), only the rows ebms, ebms-Trainer and hand of part 1 and no
hand-loop row in part 2 (hand-loop-shared, the faster loop, stays).
Record: ``benchmarks/records/<--record>.json`` (default ``residual_speed``; none for ``--quick`` unless
``--record`` is given, none with ``--no-save``): the workload, every row's median and per-repeat
times, the checks, wall time, CPU, threads, torch version and the load at the start
(``benchmarks/_record.py``); times from a shared machine are shared-machine figures.
Run: ``python benchmarks/residual_speed.py [--quick] [--threads N] [--repeats N] [--record NAME] [--no-save]``.
"""

from __future__ import annotations

import argparse
import copy
import math
from collections.abc import Callable
from typing import Any

import _common as C
import torch
import torch.nn.functional as F
from _record import Recorder
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ebms.data.negative_cache import NegativeCache
from ebms.models.lm import LSTMLM, TransformerLM
from ebms.models.residual_lm import ResidualLM
from ebms.nets.text_energy import TextEnergy
from ebms.objectives.residual_nce import ResidualNCE
from ebms.samplers.joint_resampling import top_k_joint_sample
from ebms.sequences import Sequences
from ebms.train import Trainer

BENCH = "residual_speed"
V, DIM, LAYERS, HEADS, FF = 1000, 128, 2, 4, 512
LC, K = 32, 16  # prefix length, horizon
POOL, S = 256, 8  # prefixes, cached negatives per prefix
B, NU, LR = 64, 1, 1e-3
STEPS = 2  # NCE steps per timed call
P, N, TOP_K = 8, 32, 10  # joint sampling
KINDS = (("transformer", "transformer"), ("bilstm", "lstm"))  # (energy kind, base LM)


# --- models and data ----------------------------------------------------------------------------
def make_base(kind: str) -> nn.Module:
    torch.manual_seed(1)
    if kind == "transformer":
        lm: nn.Module = TransformerLM(V, d_model=DIM, num_heads=HEADS, num_layers=LAYERS, dim_feedforward=FF,
                                      max_length=LC + K + 1)
    else:
        lm = LSTMLM(V, embedding_dim=DIM, hidden_size=DIM, num_layers=LAYERS)
    return lm.eval()


def make_energy(kind: str) -> TextEnergy:
    torch.manual_seed(2)
    net = TextEnergy(V, kind=kind, dim=DIM, layers=LAYERS, heads=HEADS, ff=FF, max_length=LC + K + 1)
    with torch.no_grad():  # the head starts at 0 (energy 0 everywhere): give it weights so checks mean something
        net.head.weight.normal_(0.0, 0.5)
    return net


def make_data(base: nn.Module) -> tuple[Sequences, Sequences, NegativeCache]:
    g = torch.Generator().manual_seed(3)
    prefixes = Sequences(torch.randint(1, V, (POOL, LC), generator=g))
    lens = torch.randint(12, K + 1, (POOL,), generator=g)
    pos_tok = torch.randint(1, V, (POOL, K), generator=g).masked_fill(torch.arange(K) >= lens[:, None], 0)
    positives = Sequences(pos_tok, lens)
    cache = NegativeCache.build(base, prefixes, S, horizon=K, generator=g, progress=False)
    return prefixes, positives, cache


def pre_join(prefix_tokens: Tensor, x: Sequences) -> tuple[Tensor, Tensor]:
    """``<s> c x`` padded with 0 (prefixes all of full length ``LC``): ``(tokens (R, 1 + LC + T), lengths)``."""
    x = x.canonical()
    bos = torch.zeros(x.batch_size, 1, dtype=torch.long)
    return torch.cat([bos, prefix_tokens, x.tokens], 1), 1 + prefix_tokens.shape[1] + x.lengths


# --- the hand-written energy: the same TextEnergy's layers on pre-joined tensors ------------------
def hand_energy(net: TextEnergy, tokens: Tensor, lengths: Tensor) -> Tensor:
    """``(R,)`` energies of joined ``<s> c x`` rows (dropout is 0: no dropout calls)."""
    width = tokens.shape[1]
    pos = torch.arange(width)
    real = pos < lengths[:, None]
    if net.kind == "bilstm":
        packed = pack_padded_sequence(net.encoder.embed(tokens), lengths, batch_first=True, enforce_sorted=False)
        h, _ = pad_packed_sequence(net.encoder.rnn(packed)[0], batch_first=True, total_length=width)
    else:
        h = net.embedding(tokens) + net.position_embedding(pos)
        mask = real[:, None, None, :]
        for block in net.layers:
            h = block(h, mask)
        h = net.ln(h)
    pooled = (h * real.unsqueeze(-1)).sum(1) / lengths[:, None]
    return net.head(pooled).squeeze(-1)


def trim(tokens: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    return tokens[:, : int(lengths.max())], lengths


# --- 1. conditional NCE -------------------------------------------------------------------------
class NCEWork:
    """One energy kind's NCE inputs: the ebms pools, the pre-joined hand pools, and the batch stream."""

    def __init__(self, kind: str, base_kind: str) -> None:
        self.kind = kind
        self.base = make_base(base_kind)
        self.prefixes, self.positives, self.cache = make_data(self.base)
        self.net0 = make_energy(kind)
        self.jpos = pre_join(self.prefixes.tokens, self.positives)
        self.jneg = pre_join(self.prefixes.tokens.repeat_interleave(S, 0), self.cache.samples)

    def stream(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, ...]:
        idx = torch.randint(POOL, (batch_size,), generator=generator)
        return ResidualNCE.pack(self.prefixes[idx], self.positives[idx], self.cache.draw(idx, NU, generator))

    def hand_batch(self, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        idx = torch.randint(POOL, (B,), generator=g)  # the same draws as stream(): indices, then picks
        rows = idx.repeat_interleave(NU) * S + torch.randint(S, (B * NU,), generator=g)
        tp, lp = trim(self.jpos[0][idx], self.jpos[1][idx])
        tn, ln = trim(self.jneg[0][rows], self.jneg[1][rows])
        return tp, lp, tn, ln

    def tokens_per_call(self) -> int:
        g, total = torch.Generator().manual_seed(11), 0
        for _ in range(STEPS):
            _, lp, _, ln = self.hand_batch(g)
            total += int(lp.sum() + ln.sum()) - lp.numel() - ln.numel()  # <s> not counted
        return total

    def model(self) -> ResidualLM:
        return ResidualLM(self.base, copy.deepcopy(self.net0), horizon=K)


def hand_loss(net: TextEnergy, tp: Tensor, lp: Tensor, tn: Tensor, ln: Tensor, *, one_call: bool) -> Tensor:
    if one_call:
        width = max(tp.shape[1], tn.shape[1])
        e = hand_energy(net, torch.cat([F.pad(tp, (0, width - tp.shape[1])), F.pad(tn, (0, width - tn.shape[1]))]),
                        torch.cat([lp, ln]))
        e_pos, e_neg = e[: lp.numel()], e[lp.numel():]
    else:
        e_pos, e_neg = hand_energy(net, tp, lp), hand_energy(net, tn, ln)
    log_nu = math.log(NU)
    return F.softplus(e_pos + log_nu).mean() + NU * F.softplus(-e_neg - log_nu).mean()


def nce_impls(work: NCEWork, quick: bool) -> dict[str, Callable[[], object]]:
    ours = work.model().train()
    opt = torch.optim.Adam(ours.energy_net.parameters(), lr=LR)
    objective = ResidualNCE(nu=NU)

    def run_ours() -> None:
        g = torch.Generator().manual_seed(11)
        for _ in range(STEPS):
            batch = work.stream(B, g)
            opt.zero_grad(set_to_none=True)
            objective(ours, batch).loss.backward()
            opt.step()

    def run_trainer(guarded: bool) -> Callable[[], object]:
        model = work.model()
        extra: dict[str, Any] = {} if guarded else {"guard": None}

        def run() -> None:
            Trainer(objective, model, work.stream, steps=STEPS, batch_size=B, run_dir=None, progress=False,
                    checkpoint_every=None, generator=torch.Generator().manual_seed(11),
                    optimizer=lambda groups: torch.optim.Adam(groups, lr=LR), **extra).fit()

        return run

    def run_hand(one_call: bool) -> Callable[[], object]:
        net = copy.deepcopy(work.net0).train()
        hopt = torch.optim.Adam(net.parameters(), lr=LR)

        def run() -> None:
            g = torch.Generator().manual_seed(11)
            for _ in range(STEPS):
                tp, lp, tn, ln = work.hand_batch(g)
                hopt.zero_grad(set_to_none=True)
                hand_loss(net, tp, lp, tn, ln, one_call=one_call).backward()
                hopt.step()

        return run

    impls = {"ebms": run_ours, "ebms-Trainer": run_trainer(True), "hand": run_hand(False)}
    if not quick:
        impls.update({"ebms-Trainer-noguard": run_trainer(False), "hand-1call": run_hand(True)})
    return impls


def max_param_diff(a: nn.Module, b: nn.Module) -> float:
    with torch.no_grad():
        return max(float((p - q).abs().max()) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def check_nce(work: NCEWork) -> dict[str, float]:
    """Same loss, gradients and one-step parameters on the same batch; Trainer = plain loop after STEPS."""
    out: dict[str, float] = {}
    ours = work.model().train()
    batch = work.stream(B, torch.Generator().manual_seed(5))
    loss = ResidualNCE(nu=NU)(ours, batch).loss
    loss.backward()
    for one_call in (False, True):
        net = copy.deepcopy(work.net0).train()
        h = hand_loss(net, *work.hand_batch(torch.Generator().manual_seed(5)), one_call=one_call)
        h.backward()
        name = "hand-1call" if one_call else "hand"
        out[f"{name}_loss_diff"] = abs(float(h.detach()) - float(loss.detach()))
        out[f"{name}_grad_diff"] = max(float((p.grad - q.grad).abs().max())
                                       for p, q in zip(ours.energy_net.parameters(), net.parameters(), strict=True))
        assert out[f"{name}_loss_diff"] <= 1e-5 * max(1.0, abs(float(loss.detach()))), (name, out)
        assert out[f"{name}_grad_diff"] <= 1e-5, (name, out[f"{name}_grad_diff"])
    # one Adam step on each side from the same weights and gradients
    net = copy.deepcopy(work.net0).train()
    hand_loss(net, *work.hand_batch(torch.Generator().manual_seed(5)), one_call=False).backward()
    torch.optim.Adam(ours.energy_net.parameters(), lr=LR).step()
    torch.optim.Adam(net.parameters(), lr=LR).step()
    out["hand_param_diff_after_step"] = max_param_diff(ours.energy_net, net)
    assert out["hand_param_diff_after_step"] <= 1e-5, out
    # Trainer.fit and the plain loop: STEPS steps of the same stream
    plain, via_trainer = work.model().train(), work.model()
    opt, g = torch.optim.Adam(plain.energy_net.parameters(), lr=LR), torch.Generator().manual_seed(11)
    for _ in range(STEPS):
        b = work.stream(B, g)
        opt.zero_grad(set_to_none=True)
        ResidualNCE(nu=NU)(plain, b).loss.backward()
        opt.step()
    Trainer(ResidualNCE(nu=NU), via_trainer, work.stream, steps=STEPS, batch_size=B, run_dir=None, progress=False,
            checkpoint_every=None, generator=torch.Generator().manual_seed(11),
            optimizer=lambda groups: torch.optim.Adam(groups, lr=LR)).fit()
    out["trainer_param_diff_after_steps"] = max_param_diff(plain.energy_net, via_trainer.energy_net)
    assert out["trainer_param_diff_after_steps"] <= 1e-5, out
    return out


# --- 2. joint sampling --------------------------------------------------------------------------
def hand_filtered(logits: Tensor) -> Tensor:
    kth = torch.topk(logits, TOP_K, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, -math.inf)


def hand_draw_loop(lm: nn.Module, prefix: Tensor, g: torch.Generator, *, shared: bool, record: bool = False
                   ) -> tuple[Sequences, Tensor | None]:
    """K tokens for each of N draws per row of ``prefix`` (P, LC) through ``lm.forward(inputs, state)``;
    lengths from the first ``</s>``. ``shared``: encode each prefix once and repeat its state N times
    (``state.select``); else encode the N repeated prefixes. With ``record``: the full-law
    log-probability of each drawn token ``(P N, K)``."""
    R = prefix.shape[0] * N
    idx = torch.arange(prefix.shape[0]).repeat_interleave(N)
    tokens = torch.zeros(R, K, dtype=torch.long)
    hist = torch.cat([torch.zeros(prefix.shape[0], 1, dtype=torch.long), prefix], 1)
    if shared:
        logits, state = lm(hist)
        logits, state = logits[:, -1][idx], state.select(idx)
    else:
        logits, state = lm(hist[idx])
        logits = logits[:, -1]
    logps = []
    for t in range(K):
        w = torch.multinomial(torch.softmax(hand_filtered(logits), -1), 1, generator=g)
        tokens[:, t] = w[:, 0]
        if record:
            logps.append(torch.log_softmax(logits, -1).gather(1, w)[:, 0])
        if t + 1 < K:
            step, state = lm(w, state)
            logits = step[:, 0]
    ended = tokens == 0
    lengths = torch.where(ended.any(1), ended.float().argmax(1), torch.full((R,), K))
    tokens = tokens.masked_fill(torch.arange(K) >= lengths[:, None], 0)
    return Sequences(tokens, lengths, validate=False), (torch.stack(logps, 1) if record else None)


def hand_pick(net: TextEnergy, rep: Tensor, x: Sequences, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """Energies of the draws and one pick per prefix by ``torch.multinomial``: ``(picked rows (P, T), -E (P, n))``."""
    tokens, lengths = trim(*pre_join(rep, x))
    neg_e = -hand_energy(net, tokens, lengths).view(P, N)
    pick = torch.multinomial(torch.softmax(neg_e, -1), 1, generator=g)[:, 0]
    return x.tokens[torch.arange(P) * N + pick], neg_e


class JointWork:
    def __init__(self, kind: str, base_kind: str) -> None:
        self.kind = kind
        self.model = ResidualLM(make_base(base_kind), make_energy(kind), horizon=K).eval()
        self.prefix = Sequences(torch.randint(1, V, (P, LC), generator=torch.Generator().manual_seed(7)))
        self.rep = self.prefix.tokens.repeat_interleave(N, 0)

    def ours(self, seed: int) -> Any:
        return top_k_joint_sample(self.model, self.prefix, N, top_k=TOP_K, generator=torch.Generator().manual_seed(seed))

    def hand_sample(self, seed: int) -> tuple[Sequences, Tensor, Tensor]:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            x = self.model.base.sample(P * N, generator=g, max_length=K, top_k=TOP_K,
                                       prefix=Sequences(self.rep, validate=False), truncate=True)
            return (x, *hand_pick(self.model.energy_net, self.rep, x, g))

    def hand_loop(self, seed: int, *, shared: bool, record: bool = False) -> tuple[Sequences, Tensor | None, Tensor]:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            x, logps = hand_draw_loop(self.model.base, self.prefix.tokens, g, shared=shared, record=record)
            return x, logps, hand_pick(self.model.energy_net, self.rep, x, g)[0]


def check_joint(work: JointWork) -> dict[str, float]:
    ours = work.ours(13)
    x, _, neg_e = work.hand_sample(13)
    assert torch.equal(x.canonical().tokens, ours.draws.canonical().tokens), "hand lm.sample draws differ"
    e_diff = float((neg_e.double() - ours.log_weights).abs().max())
    assert e_diff <= 1e-4, e_diff
    out = {"hand-lm.sample_energy_diff": e_diff, "mean_draw_length": float(ours.draws.lengths.float().mean())}
    for shared in (False, True):
        y, logps, _ = work.hand_loop(13, shared=shared, record=True)
        assert logps is not None
        with torch.no_grad():
            ref = work.model.base.continuation_token_log_probs(Sequences(work.rep, validate=False), y)[:, :K]
        real = torch.arange(K) < y.lengths[:, None]
        name = "hand-loop-shared" if shared else "hand-loop"
        out[f"{name}_logprob_diff"] = float((logps - ref).abs().masked_fill(~real, 0).max())
        assert out[f"{name}_logprob_diff"] <= 1e-4, out
    return out


# --- driver -------------------------------------------------------------------------------------
def summarise(times: dict[str, list[float]], cpu: dict[str, list[float]], work_per_call: float
              ) -> dict[str, dict[str, Any]]:
    med = {n: C.median(t) for n, t in times.items()}
    hand = med["hand"] if "hand" in med else med["hand-lm.sample"]
    cpu_med = {n: C.median(t) for n, t in cpu.items()}
    cpu_hand = cpu_med["hand"] if "hand" in cpu_med else cpu_med["hand-lm.sample"]
    rows = {}
    for n, t in med.items():
        ours = n.startswith("ebms")
        rows[n] = {"median_s": t, "all_s": times[n], "cpu_median_s": cpu_med[n], "cpu_all_s": cpu[n],
                   "rate": work_per_call / t, "speedup_vs_hand": C.speedup(hand, t) if ours else None,
                   "cpu_speedup_vs_hand": C.speedup(cpu_hand, cpu_med[n]) if ours else None}
    return rows


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record", default=None,
                   help=f"record name, benchmarks/records/NAME.json (default {BENCH}; --quick: no record)")


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], _add_args)
    info = C.machine_info()
    repeats = args.repeats or (3 if args.quick else 9)
    warmup = 0 if args.quick else 1  # the checks have already run every code path once
    record_name = args.record or (None if args.quick else BENCH)
    rec = Recorder(record_name or BENCH, settings={"quick": args.quick, "repeats": repeats, "warmup": warmup})
    results: dict[str, Any] = {"nce": {}, "joint": {}}
    for kind, base_kind in KINDS:
        C.note(f"[{BENCH}] NCE {kind}: building data and checking")
        work = NCEWork(kind, base_kind)
        check = check_nce(work)
        tokens = work.tokens_per_call()
        wall, cpu = C.time_alternating(nce_impls(work, args.quick), repeats=repeats, warmup=warmup)
        results["nce"][kind] = {"check": check, "tokens_per_call": tokens, "steps_per_call": STEPS,
                                "rows": summarise(wall, cpu, tokens)}
    for kind, base_kind in KINDS:
        C.note(f"[{BENCH}] joint sampling {kind} energy, {base_kind} base: checking")
        jw = JointWork(kind, base_kind)
        check = check_joint(jw)
        impls = {"ebms": lambda jw=jw: jw.ours(17), "hand-lm.sample": lambda jw=jw: jw.hand_sample(17),
                 "hand-loop-shared": lambda jw=jw: jw.hand_loop(17, shared=True)}
        if not args.quick:
            impls["hand-loop"] = lambda jw=jw: jw.hand_loop(17, shared=False)
        wall, cpu = C.time_alternating(impls, repeats=repeats, warmup=warmup)
        rows = summarise(wall, cpu, P * N)
        for r in rows.values():
            r["picks_per_s"] = r["rate"] / N
        for h in ("hand-loop", "hand-loop-shared"):
            if h in wall:
                rows["ebms"][f"speedup_vs_{h}"] = C.speedup(C.median(wall[h]), rows["ebms"]["median_s"])
        results["joint"][f"{kind}/{base_kind}"] = {"check": check, "rows": rows}

    print(f"Residual EBM speed: V={V}, prefix {LC}, horizon {K}, TextEnergy d={DIM} x {LAYERS} layers; "
          f"{info['threads']} thread(s), {repeats} repeats, medians")
    print("speedup = hand median time / ebms median time (> 1: ebms faster); cpu columns: the same from process "
          "CPU time (the cross-check on a busy machine)")
    print(f"\n1. Conditional NCE training, B={B}, nu={NU}, Adam, {STEPS} steps per call "
          "(tokens = prefix + continuation tokens of positives and negatives)")
    table = []
    for kind, res in results["nce"].items():
        for n, r in res["rows"].items():
            table.append([kind, n, r["median_s"] / STEPS, r["rate"], r["speedup_vs_hand"], r["cpu_median_s"] / STEPS,
                          r["cpu_speedup_vs_hand"]])
    print(C.format_table(["energy", "impl", "s/step", "tokens/s", "speedup", "cpu s/step", "cpu speedup"], table))
    print(f"\n2. Joint sampling (Algorithm 1), P={P} prefixes x n={N} draws, top-k {TOP_K}, horizon {K}")
    table = []
    for key, res in results["joint"].items():
        for n, r in res["rows"].items():
            table.append([key, n, r["median_s"], r["rate"], r["picks_per_s"], r["speedup_vs_hand"],
                          r.get("speedup_vs_hand-loop"), r.get("speedup_vs_hand-loop-shared"), r["cpu_median_s"],
                          r["cpu_speedup_vs_hand"]])
    print(C.format_table(["energy/base", "impl", "s/call", "draws/s", "picks/s", "speedup vs lm.sample",
                          "vs loop", "vs loop-shared", "cpu s", "cpu speedup vs lm.sample"], table))
    print("Notes: hand-loop draws each token with torch.multinomial (on CPU slower than ebms's inverse-CDF draw); "
          "hand-loop-shared encodes each prefix once and repeats its state for the n draws, which ebms's "
          "sample_base (and the other hand rows) do not: they encode all P n repeated prefixes.")
    checks = {f"nce/{k}": v["check"] for k, v in results["nce"].items()}
    checks.update({f"joint/{k}": v["check"] for k, v in results["joint"].items()})
    print("\nchecks (asserted): " + "; ".join(f"{k}: " + ", ".join(f"{a}={b:.1e}" for a, b in v.items())
                                             for k, v in checks.items()))

    record = {"bench": BENCH, "quick": args.quick, "machine": info, "repeats": repeats,
              "workload": {"vocab": V, "dim": DIM, "layers": LAYERS, "heads": HEADS, "ff": FF, "prefix": LC,
                           "horizon": K, "pool": POOL, "cache_per_prefix": S, "batch": B, "nu": NU, "lr": LR,
                           "steps_per_call": STEPS, "joint_prefixes": P, "joint_n": N, "top_k": TOP_K},
              "results": results}
    path = C.save_results(BENCH, record, enabled=not args.no_save)
    if path is not None:
        C.note(f"[{BENCH}] wrote {path}")
    summary: dict[str, Any] = {"bench": BENCH, "quick": args.quick, "threads": info["threads"],
                               "ratio": "hand_time / ebms_time"}
    for kind, res in results["nce"].items():
        rows = res["rows"]
        summary[f"nce_{kind}_ebms_tokens_per_s"] = round(rows["ebms"]["rate"], 1)
        summary[f"nce_{kind}_hand_tokens_per_s"] = round(rows["hand"]["rate"], 1)
        summary[f"nce_{kind}_ratio"] = round(rows["ebms"]["speedup_vs_hand"], 3)
        summary[f"nce_{kind}_trainer_ratio"] = round(rows["ebms-Trainer"]["speedup_vs_hand"], 3)
    for key, res in results["joint"].items():
        rows, k = res["rows"], key.split("/")[0]
        summary[f"joint_{k}_ebms_draws_per_s"] = round(rows["ebms"]["rate"], 1)
        summary[f"joint_{k}_ratio_vs_lm_sample"] = round(rows["ebms"]["speedup_vs_hand"], 3)
        if "hand-loop" in rows:
            summary[f"joint_{k}_ratio_vs_hand_loop"] = round(rows["ebms"]["speedup_vs_hand-loop"], 3)
        summary[f"joint_{k}_ratio_vs_hand_loop_shared"] = round(rows["ebms"]["speedup_vs_hand-loop-shared"], 3)
    rec.settings["workload"] = record["workload"]
    rec.write({"summary": summary, "results": results},
              notes="speedup = hand median wall time / ebms median wall time (> 1: ebms faster); cpu_* the same "
                    "from process CPU time. rate: tokens/s (NCE) or scored draws/s (joint sampling). Medians of "
                    "the repeats, implementations interleaved (_common.time_alternating). Measured on a shared "
                    "machine: see load_avg_1min_at_start.",
              enabled=record_name is not None and not args.no_save)
    C.emit_final_line(summary)


if __name__ == "__main__":
    main()
