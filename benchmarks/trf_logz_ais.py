"""Per-length log normalisers log Z_l of a PTB TRF (discrete or neural): importance sampling vs AIS, and the cost.

Workload:
    model       a TRF saved by ``repro_trf_ptb`` (``--model PATH``: ``torch.save({"trf", "classes",
                "vocab_size", "order", "unigram", "steps"})``), or an ``ebms train`` run folder (``--run DIR``,
                e.g. ``runs/trf-ptb-b`` of ``ebms train trf-ptb``: its newest valid checkpoint, read only, through
                ``rescoring_lms.open_trf_run``; its word classes and vocabulary from ``vocab.json``, its training
                sentences and the PTB test set encoded with that vocabulary; the TRF's own zeta is the
                "training zeta" row), or, without either, the TRF that ``repro_trf_ptb`` starts from,
                untrained: 200 exchange classes, features w/c/ws/cs/wsh/csh at order 4 read over ``<s> x </s>``
                (5.9M), word n-gram weights set from KN4 (``ebms.models.trf.ngram_weights``). There ``-E(x)``
                is KN4's log-probability up to a constant, so importance sampling from KN4 is already good:
                AIS must agree with it within the errors (a correctness check). Or a neural TRF
                (``--neural DIR``: below).
    lengths     the test lengths (PTB test set, 60 lengths 1..77), or ``--lengths``.
    proposal    ``q(x | l) = prod_t p_KN(x_t | h_t) / (1 - p_KN(</s> | h_t))`` (``LengthConditionalLM`` of
                the KN n-gram of the model's order, fitted on the training sentences).
    IS          ``importance_log_z_per_length``, ``--is-draws`` draws per length (default 100; the draws
                from the n-gram proposal cost O(V) per token: 500 draws x 60 lengths took 379 s).
    AIS         ``ais_log_z_per_length`` forward from ``q`` along ``(1 - beta) log q - beta E``, ``--chains``
                chains per length (default 10), ``--temps`` transitions (default 80) on a linear (or
                ``--schedule sigmoid``) beta schedule, each ``--sweeps`` sweeps of a within-length
                ``TransDimensional(jump=False, token_probs=unigram)`` kernel: ``--kernel unigram``
                (default; MH with unigram proposals, ``--trials`` multiple tries; 2 candidates scored per
                move) or ``--kernel class`` (class from the unigram mass, word from the exact conditional
                inside the class, MH-corrected; ~117 candidates per move at 200 classes). Measured on
                the KN-initialised TRF at beta = 0.5: unigram ~4,400 position-moves/s at acceptance
                0.16, class ~520-860/s at 0.22 (one thread), so the unigram kernel mixes more per second.
                Or ``--kernel independence``: ``MetropolisIndependence(q)``, the AIS proposal itself as an
                independence sampler: each chain keeps its length and proposes a whole new sentence from
                ``q(. | l)``, accepted by the ratio of importance weights of the current annealed target;
                ``--sweeps S`` is then S such steps per temperature (and ``--burn B`` B x S steps at beta = 1).
                All lengths of a group (``--group`` lengths, default 15) share each kernel call.
    reverse     ``--reverse N`` (default 5; 0: off): reverse AIS from approximate model samples, N per
                length: test sentences of that length (cycled) moved by ``--burn`` sweeps (default 20)
                of the same kernel at ``beta = 1``. Forward is a stochastic lower bound of log Z_l;
                reverse is an upper bound only when its start is exact, so the bracket
                ``[min - 2 se, max + 2 se]`` is informative, not guaranteed; ``crossed`` (reverse below
                forward) flags a start that is not at the model or too few chains.
    perplexity  ``trf_perplexity`` over the test sentences of the estimated lengths, under IS, forward
                AIS, and the bracket's ends (log Z_l at its lower / upper end give the lower / upper
                perplexity).
    cost        seconds of each estimator, seconds per length, position-moves per second of the kernel
                (one position of one chain re-drawn once; with the independence kernel one token of a
                proposed sentence, "sentence-tokens": the same count), with ``--threads`` torch threads;
                ``--budget`` seconds stops AIS between groups (later lengths keep only IS). AIS costs
                about (chains + reverse) x (sum of lengths: 1,860 for the 60 test lengths) x (temps - 1)
                x sweeps position-moves.

Convergence table (``--temps-list K1,K2,...``, e.g. ``100,300,1000,3000``; no IS): for each K (increasing),
forward AIS log Z_l at every length with the same ``--chains`` and a fresh generator seeded from
``(--seed, K)`` (independent runs), the test perplexity with its 95 % delta-method interval, the ESS
of each length's AIS weights (median and min over lengths) and the seconds; then, for each pair of
successive K, the change of perplexity against their combined interval ``1.96 sqrt(se_1^2 + se_2^2)``
("within" / "outside"): the table has stopped moving at the first K from which every later change is
within. The intervals rest on the forward stderr, which is too small when ESS is a small fraction of
the chains (forward AIS is a stochastic lower bound of log Z_l, so its perplexity is a stochastic
lower bound too and creeps up as K grows). At the largest K run, reverse AIS from ``--reverse`` model
samples per length (as above) gives the bracket on perplexity. Beside them: the training-zeta
perplexity, ebms's KN5 (``benchmarks/records/kn5_ptb.json``, when present) and the published figures
of the source's results table (:data:`PUBLISHED`). Before running, a probe (``PROBE_TEMPS``
temperatures at a few lengths) measures position-moves per second and the plan of each K is printed
(moves x rate); the rate is re-measured after each K. ``--budget S`` bounds the whole run's seconds
(from the start, loading included): a K runs only when it, and the reverse run at the last K that
fits, fit in what is left; a later K is marked "not run (budget)"; a K is also stopped between
groups when the next group would pass the budget. A full run (not ``--quick``, not ``--no-save``)
writes the record ``benchmarks/records/trf_ais_convergence.json`` (``--name NAME``: ``NAME.json``, for a second
run beside the first, e.g. the reverse bracket at another K).

Neural TRF (``--neural DIR [--neural-kind dnce|nce]``, default dnce; not with ``--model`` / ``--run``): the TRF
with a ``Hidden2Scalar.bilstm`` energy and the LSTM LM that ``benchmarks/neural_trf_lstm.py --save DIR`` wrote
(``lstm.pt``, ``dnce.pt`` / ``nce.pt``, loaded by that module's ``load_ptb`` and ``load_models``), on the
whole PTB test set (3,761 sentences, the same 60 lengths). Proposal: ``LengthConditionalLM(lstm)``, the saved
LSTM given the length (far closer to the TRF than an n-gram), scored by :class:`TrimmedLM` (each distinct
sentence once, up to its own length; float32 log-sum-exp); kernel: the unigram one, without classes (``--kernel
class`` is refused), or the independence one (below); ``--group`` default 5. A BiLSTM offers no local ``token_logits``, so the library scores a
position-move's candidates as whole sentences (``variant_scores``): the trial and the current sentence under
the BiLSTM, the trial under the LSTM (the current one comes from :class:`TrimmedLM`'s memo), so a sweep of a
chain of length l costs O(l^2) token evaluations, not O(l). Cost unit ("token-evals"): LSTM token evaluations
plus ``rho`` x BiLSTM ones (``rho``: the measured ratio of their token rates), per AIS run of ``n`` chains per
length ``n (2 sum l + (K - 1) sum l^2) + rho n (sum l + (K - 1)(2 sum l + 2 sum l^2))`` (1 sweep, 1 trial;
a reverse run adds ``rho n (sum l + 2 burn sum l^2)``); the probe times the BiLSTM and the LSTM on 64
sentences at the middle length, then runs 4 temperatures there. Measured on one core of this (shared, 2-core)
machine, PTB test lengths (sum l^2 = 77,674), 10 chains, 5 reverse, burn 20: BiLSTM (256, one layer) ~1,300
sentences/s at length 31 (~40,000 tokens/s), LSTM (2 x 256, V = 10,000) ~290 sentences/s (~9,000 tokens/s),
AIS ~7,500-8,300 token-evals/s; forward + reverse: K = 10 ~0.6 h, K = 30 ~1.8 h, K = 100 ~5.7 h, K = 300
~17 h, K = 1,000 ~57 h (the plan printed before running says it for the run's own settings).
``--kernel independence`` (``MetropolisIndependence(TrimmedLM)``, the AIS base as proposal): a step draws one
sentence per chain from the LSTM given the length, scores it under the LSTM (the current one comes from the memo)
and under the BiLSTM: O(l) per step, not O(l^2). Its unit adds ``sigma`` x sampled LSTM tokens (``sigma``: the
LSTM's scoring token rate over its sampling rate; a group's draw runs every row to the group's longest length,
so a draw costs ``m = sum over groups |G| max G`` tokens per chain); per run of ``n`` chains per length with
``M = (K - 1) S`` steps: ``n ((1 + M) s1 + sigma (1 + M) m + rho (1 + 2 (K - 1) + M) s1)``, ``s1 = sum l`` (a
BiLSTM pass at each temperature's kernel start and slope; a reverse run: ``M = (K - 1 + burn) S``, no base draw,
one more BiLSTM pass). The probe is the same (one length, 4 temperatures; it batches fewer rows than a group, so
its rate is on the low side: 2,000 vs 3,000-4,200 token-evals/s on ``--quick``). Measured on the models of a
``neural_trf_lstm.py --quick`` folder (same sizes), PTB test lengths, 10 chains, 5 reverse, burn 20, one core of
this shared machine: LSTM sampling ~175 sentences/s at length 31 (~5,400 tokens/s, ``sigma`` ~1.9), probe ~5,500
token-evals/s; forward + reverse K = 100 ~0.56 h, K = 300 ~1.6 h, K = 1,000 ~5.3 h, against 5.4 h, 16 h and 53 h
for the unigram kernel in the same plan (~10x). Prefer it when ``q`` is close to the model (the TRF a correction
of its LSTM): a step moves the whole sentence or nothing, so it mixes only as well as ``q`` covers each annealed
target. On the quick folder (TRF trained 2 steps, LSTM 15) at K = 12, 8 chains, 4 reverse, its forward log Z_l
at l = 14 was 100.5 against the unigram kernel's 121.8 (forward AIS is a stochastic lower bound: the larger is
nearer), while its forward/reverse gap (-1.0..+0.7 nats) looked better than the unigram one's (-0.5..+17.8): its
reverse chains barely left the test sentences. Compare both kernels' forward values at a small K first. Beside the
table: the TRF's training zeta (a perplexity for NCE; for DNCE NOT one: its zeta settles at log Z_l +
log pi_l - log pi_int,l, see ``neural_trf_lstm.py``), the perplexity with the IS log Z_l saved with the model,
and the LSTM's exact perplexity on the same sentences (recomputed) and as saved; no KN5 or published rows
(those are the discrete TRF's). Records: ``trf_ais_convergence_neural_<kind>`` (``--temps-list``) and
``trf_logz_ais_neural_<kind>`` (IS vs AIS), each with the folder's ``_cf<C>`` when its name has one.

``--quick``: the first 2,000 training / 200 test sentences (vocabulary of the subset), 20 classes,
order 3, every 4th test length, 20 IS draws, 4 chains, 4 temperatures, 2 reverse chains (well under
a minute); with ``--run``, the run's data and every 4th test length; with ``--neural``, the first 300 test
sentences of at most 16 words and every 4th of their lengths (2, 6, 10, 14; ``--quick --neural DIR
--temps-list 3,6 --chains 3 --reverse 2``: ~15 s). Run: ``python benchmarks/trf_logz_ais.py [--quick]
[--model PATH | --run DIR | --neural DIR [--neural-kind dnce|nce]] [--temps-list K1,K2,...]
[--kernel unigram|class|independence] [--chains C] [--temps K] [--sweeps S] [--reverse N] [--budget SECONDS]``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import _common as C
import _speed_record as SR
import torch
from _record import RECORDS_DIR, Recorder
from repro_trf_ptb import kn_started_trf, ptb_data, unigram_counts

from ebms.data import sentence_batches
from ebms.distributions import BackoffNGram
from ebms.estimators import (
    Estimate,
    LengthConditionalLM,
    LengthLogZ,
    ais_log_z_per_length,
    importance_log_z_per_length,
    linear_betas,
    sigmoid_betas,
)
from ebms.metrics import trf_perplexity
from ebms.models.lm import perplexity as lm_perplexity
from ebms.models.trf import TRF
from ebms.samplers import Sampler
from ebms.samplers.metropolis import MetropolisIndependence
from ebms.samplers.trans_dimensional import TransDimensional
from ebms.sequences import Sequences

BENCH = "trf_logz_ais"
CONVERGENCE = "trf_ais_convergence"
PROBE_TEMPS = 10  # temperatures of the rate probe
NEURAL_PROBE_TEMPS = 4  # neural TRF: temperatures of the rate probe (at one length)
NEURAL_GROUP = 5  # neural TRF: default lengths per AIS call
NEURAL_QUICK = (300, 16)  # neural --quick: the first 300 test sentences, those of at most 16 words
Z95 = 1.96
SOURCE_TABLE = ("wbengine/SPMILM egs/ptb_wsj0/models_ppl.txt (commit 02061cd2190a7dcb3b535d0d77cec62520143b58), "
                "column PPL-test")
_TRF = "trf_c200_g4_w_c_ws_cs_wsh_csh_tied"
#: PTB test perplexities of the source's own results table (published, not measured here): (label, row, value).
PUBLISHED = {
    "kn5": ("KN5, the source's table", "KN5", 141.187),
    "source_trf_own_zeta": ("source's TRF (same features), its own zeta", _TRF, 139.941),
    "source_trf_ais10_1000": ("source's TRF, its AIS10-1000", _TRF + ":AIS10-1000", 148.229),
    "source_trf_ais10_10000": ("source's TRF, its AIS10-10000", _TRF + ":AIS10-10000", 170.244),
    "source_trf_ais10_20000_mean": ("source's TRF, its AIS10-20000 (10 runs: mean, sd 6.26)",
                                    _TRF + ".run0.ais10_20000.avg", 203.01),
}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="a TRF saved by repro_trf_ptb (default: the KN-initialised TRF)")
    p.add_argument("--run", type=Path, default=None, help="an `ebms train` TRF run folder (read only)")
    p.add_argument("--neural", type=Path, default=None, help="a `neural_trf_lstm.py --save` folder: its neural "
                                                              "TRF, with its LSTM as the AIS proposal (read only)")
    p.add_argument("--neural-kind", choices=("dnce", "nce"), default=None, help="with --neural: the TRF to load "
                                                                                 "(default dnce)")
    p.add_argument("--lengths", default=None, help="comma-separated lengths (default: every test length)")
    p.add_argument("--temps-list", default=None, help="convergence table: AIS temperatures K1,K2,... (increasing)")
    p.add_argument("--is-draws", type=int, default=None, help="IS draws per length (default 100; quick 20)")
    p.add_argument("--chains", type=int, default=None, help="forward AIS chains per length (default 10; quick 4)")
    p.add_argument("--temps", type=int, default=None, help="AIS transitions K (default 80; quick 4)")
    p.add_argument("--sweeps", type=int, default=1, help="kernel sweeps per temperature (independence: steps)")
    p.add_argument("--schedule", choices=("linear", "sigmoid"), default="linear")
    p.add_argument("--kernel", choices=("class", "unigram", "independence"), default="unigram",
                   help="AIS kernel: single-position MH moves (unigram, class) or whole-sentence proposals from the "
                        "AIS proposal (independence)")
    p.add_argument("--trials", type=int, default=1, help="multiple-try proposals per move (TransDimensional trials)")
    p.add_argument("--reverse", type=int, default=None, help="reverse AIS chains per length (default 5; quick 2; 0: none)")
    p.add_argument("--burn", type=int, default=20, help="kernel sweeps at beta = 1 before reverse AIS")
    p.add_argument("--group", type=int, default=None, help=f"lengths per AIS call (0: all in one; default 15, "
                                                           f"{NEURAL_GROUP} with --neural)")
    p.add_argument("--budget", type=float, default=None, help="seconds: AIS seconds (later groups skipped); with "
                                                              "--temps-list the whole run's (later K not run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default=None, help=f"with --temps-list: the record's name (default {CONVERGENCE}, "
                                                "plus the neural suffix), e.g. for a second run beside the first")


def parse_temps(text: str) -> list[int]:
    """``"100,300"`` -> ``[100, 300]``: increasing integers >= 2, else one line naming the flag."""
    try:
        ks = [int(v) for v in text.split(",")]
    except ValueError:
        ks = []
    if not ks or min(ks) < 2 or ks != sorted(set(ks)):
        raise SystemExit(f"--temps-list: expected increasing integers >= 2 separated by commas (e.g. "
                         f"100,300,1000,3000); got {text!r}")
    return ks


def build(quick: bool, path: str | None) -> dict[str, Any]:
    """Data, KN proposal and the TRF (loaded, or KN-initialised as in repro_trf_ptb)."""
    train, test, V = ptb_data(quick)
    if path is not None:
        saved = torch.load(path, weights_only=False)
        if saved["vocab_size"] != V:
            raise ValueError(f"--model: vocabulary {saved['vocab_size']} != {V} of the data (--quick mismatch?)")
        saved["kn"] = BackoffNGram.fit(train, V, saved["order"])
        return {**saved, "train": train, "test": test}
    n_classes, order = (20, 3) if quick else (200, 4)
    kn = BackoffNGram.fit(train, V, order)
    L = max(int(train.lengths.max()), int(test.lengths.max()))
    trf, classes, _ = kn_started_trf(train, L, V, kn, n_classes)
    return {"trf": trf, "classes": classes, "vocab_size": V, "order": order, "unigram": unigram_counts(train, V),
            "steps": 0, "kn": kn, "train": train, "test": test}


def build_run(run_dir: Path) -> dict[str, Any]:
    """The TRF of an ``ebms train`` run folder with its classes, training and test sentences (reads only)."""
    from rescoring_lms import open_trf_run

    _, cfg, trf, data, info = open_trf_run(run_dir, flag="--run")
    if "test" not in data.held_out:
        raise SystemExit(f"--run: {run_dir}: the run has no test split (language.test_path)")
    test = data.held_out["test"]
    keep = test.lengths <= trf.max_length  # `ebms eval` refuses longer ones; counted here
    V, order = len(data.vocab), cfg.sections["trf"].order
    stored = (data.stored or {}).get("classes")
    return {"trf": trf, "classes": None if stored is None else torch.tensor(stored, dtype=torch.long),
            "vocab_size": V, "order": order, "unigram": unigram_counts(data.train, V), "steps": info["checkpoint_step"],
            "kn": proposal_ngram(data.train, V, order), "train": data.train,
            "test": test[keep.nonzero().squeeze(1)], "run": {**info, "test_longer_than_L": int((~keep).sum())}}


def proposal_ngram(train: Sequences, V: int, order: int) -> BackoffNGram:
    """Modified KN of ``order`` on ``train``; KenLM's fallback discounts (0.5, 1, 1.5) at every order, with a
    note, when a small corpus lacks the counts-of-counts to estimate them (the proposal stays normalised)."""
    try:
        return BackoffNGram.fit(train, V, order)
    except ValueError as e:
        if not str(e).startswith("discounts:"):
            raise
        C.note(f"[{BENCH}] proposal: {str(e).split(': a small')[0]}; KenLM's fallback discounts used")
        return BackoffNGram.fit(train, V, order, discounts=[(0.5, 1.0, 1.5)] * order)


class TrimmedLM(LengthConditionalLM):
    """:class:`~ebms.estimators.LengthConditionalLM` of an LSTM whose ``log_prob`` scores each distinct sentence
    once (a memo of the values it gave), up to its own length, in chunks of ``chunk_tokens`` tokens, with a
    float32 log-sum-exp over the words; ``sample`` is the library's.

    Why: the kernel holds every chain padded to the TRF's ``L`` (92 on PTB) and hands the proposal, at each
    position-move, the trial sentence and the current one (and, past a chain's length, the current one twice);
    the library's ``log_prob`` runs the LSTM over all of them and the padding and takes a float64
    ``log_softmax`` of ``(B, T, V)``. The memo finds the current sentences (scored at the previous move), so
    each move costs about one LSTM pass over one sentence; trimming saves the padding (2-10x at PTB lengths);
    chunks of 512 tokens keep the ``(rows, T, V)`` logits in cache (~20 MB; 15-25 % faster than 4,096); the
    float32 log-sum-exp is 1.6x faster at V = 10,000 and agrees with the library's to ~1e-5 nats per sentence
    (float32 rounding, tested). The LM must stay fixed while the object is used (the memo is cleared when it
    holds ``memo`` sentences).
    """

    def __init__(self, lm: Any, *, chunk_tokens: int = 512, memo: int = 1 << 18) -> None:
        super().__init__(lm)
        self.chunk_tokens, self.memo = chunk_tokens, memo
        self._seen: dict[bytes, float] = {}
        self.scored = 0  # sentences the LSTM scored (memo misses)

    def log_prob(self, x: Sequences) -> torch.Tensor:
        if self.ngram or not isinstance(x, Sequences) or x.batch_size == 0 or int(x.lengths.max()) == 0:
            return super().log_prob(x)
        T = int(x.lengths.max())
        x = Sequences(x.tokens[:, :T], x.lengths, validate=False)
        real = x.mask()
        if bool((real & ((x.tokens == self.boundary) | (x.tokens < 0) | (x.tokens >= self.vocab_size))).any()):
            return super().log_prob(x)  # the library's message
        arr, lengths = x.tokens.cpu().numpy(), x.lengths.tolist()
        keys = [arr[i, :n].tobytes() for i, n in enumerate(lengths)]
        if len(self._seen) > self.memo:
            self._seen.clear()
        todo: dict[bytes, int] = {}
        for i, k in enumerate(keys):
            if k not in self._seen:
                todo.setdefault(k, i)
        rows = sorted(todo.values(), key=lambda i: -lengths[i])
        values = self._score(x, rows)
        self._seen.update(zip((keys[i] for i in rows), values))
        self.scored += len(rows)
        return torch.tensor([self._seen[k] for k in keys], dtype=torch.float64, device=x.device)

    def _score(self, x: Sequences, rows: list[int]) -> list[float]:
        """:math:`\\log q` of the sentences ``rows`` of ``x`` (longest first), in chunks trimmed to their longest."""
        dev, out, i = self._device(), [], 0
        while i < len(rows):
            T = int(x.lengths[rows[i]])
            n = max(1, self.chunk_tokens // T)
            sel = torch.tensor(rows[i:i + n], device=x.device)
            real = (torch.arange(T, device=x.device) < x.lengths[sel, None]).to(dev)
            t = x.tokens[sel, :T].to(dev) * real
            start = torch.full((t.shape[0], 1), self.boundary, dtype=torch.long, device=dev)
            with torch.no_grad():
                logits = self.lm(torch.cat([start, t[:, :-1]], 1), None)[0].float()
            logits[..., self.boundary] = -math.inf
            lp = logits.gather(-1, t.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
            out += torch.where(real, lp, 0.0).double().sum(1).tolist()
            i += n
        return out

    def __repr__(self) -> str:
        return f"TrimmedLM({type(self.lm).__name__}, vocab_size={self.vocab_size})"


def neural_suffix(folder: Path) -> str:
    """``_cf<C>`` when the folder's name carries it (``neural_trf_lstm.py --noise-classes C``), else ``""``."""
    m = re.search(r"_cf(\d+)(?!\d)", Path(folder).resolve().name)
    return "" if m is None else f"_cf{m.group(1)}"


def check_neural_folder(folder: Path, kind: str) -> None:
    """One line naming the folder and the command that writes it when ``lstm.pt`` or ``<kind>.pt`` is missing."""
    missing = [f for f in ("lstm.pt", f"{kind}.pt") if not (Path(folder) / f).is_file()]
    if missing:
        raise SystemExit(f"--neural: {folder}: no {' or '.join(missing)} (written by `python "
                         f"benchmarks/neural_trf_lstm.py --save {folder}`)")


def build_neural(folder: Path, kind: str, quick: bool) -> dict[str, Any]:
    """The neural TRF ``kind`` and the LSTM of a ``neural_trf_lstm.py --save`` folder (that module's loaders),
    PTB as it encodes it, and the LSTM proposal (reads only)."""
    import neural_trf_lstm as NT

    check_neural_folder(folder, kind)
    data = NT.load_ptb()
    try:
        found = NT.load_models(Path(folder), data)
    except ValueError as e:
        raise SystemExit(f"--neural: {e}") from None
    trf, saved_log_z, rec = found[kind]
    lstm_rec = torch.load(Path(folder) / "lstm.pt", weights_only=False).get("record", {})
    test = data.test
    if quick:
        n, longest = NEURAL_QUICK
        test = test[torch.arange(min(n, test.batch_size))]
        test = test[(test.lengths <= longest).nonzero().squeeze(1)]
    test = Sequences(test.tokens[:, : int(test.lengths.max())], test.lengths)
    V = len(data.vocab)
    return {"trf": trf, "classes": None, "vocab_size": V, "order": None, "unigram": unigram_counts(data.train, V),
            "steps": rec["steps"], "train": data.train, "test": test, "proposal": TrimmedLM(found["lstm"]),
            "neural": {"kind": kind, "dir": str(folder), "suffix": neural_suffix(folder), "lstm": found["lstm"],
                       "lstm_record": {k: lstm_rec.get(k) for k in ("steps", "test_perplexity", "tokens")},
                       "record": rec, "saved_log_z": saved_log_z}}


def saved_is(d: dict[str, Any]) -> LengthLogZ:
    """The IS log Z_l that ``neural_trf_lstm`` saved with the TRF, with its stderrs when they are finite."""
    nd = d["neural"]
    values = nd["saved_log_z"].double()
    se = nd["record"].get("logz_stderr")
    if se is None or len(se) != values.shape[0] or not all(v is not None and math.isfinite(v) for v in se):
        return LengthLogZ.exact(values)
    return LengthLogZ(tuple(range(1, values.shape[0] + 1)),
                      tuple(Estimate(float(v), stderr=float(e), settings={"method": "importance", "length": n + 1})
                            for n, (v, e) in enumerate(zip(values.tolist(), se))), "importance")


def neural_speed(d: dict[str, Any], length: int, n: int = 64) -> dict[str, float]:
    """Sentences per second of the BiLSTM energy and of the LSTM proposal's ``log_prob`` on ``n`` proposal draws
    of ``length`` padded to ``L`` (as the kernel holds them), and of the proposal's ``sample`` of ``n`` sentences
    of ``length`` (best of 2 calls each); ``rho`` and ``sigma``, the LSTM's scoring token rate over the BiLSTM's
    and over its own sampling rate (the weights of an energy token and of a sampled token in the cost unit). The
    proposal is timed without its memo (a fresh :class:`TrimmedLM` per call)."""
    g, prop = torch.Generator().manual_seed(12345), d["proposal"]
    x = prop.sample(n, g, lengths=length).pad_to(d["trf"].max_length)
    seconds = {}
    for name in ("energy", "proposal", "sampling"):
        times = []
        for _ in range(2):
            fn = (d["trf"].energy if name == "energy" else (lambda _: prop.sample(n, g, lengths=length))
                  if name == "sampling" else TrimmedLM(prop.lm, chunk_tokens=prop.chunk_tokens).log_prob)
            t0 = time.perf_counter()
            with torch.no_grad():
                fn(x)
            times.append(time.perf_counter() - t0)
        seconds[name] = min(times)
    return {"length": length, "batch": n, **{f"{k}_sentences_per_s": n / v for k, v in seconds.items()},
            **{f"{k}_tokens_per_s": n * length / v for k, v in seconds.items()},
            "rho": seconds["energy"] / seconds["proposal"], "sigma": seconds["sampling"] / seconds["proposal"]}


def neural_work(n: int, lengths: list[int], temps: int, sweeps: int, trials: int, rho: float,
                burn: int = 0) -> float:
    """AIS cost on a neural TRF with the :class:`TrimmedLM` proposal, ``n`` chains per length (module
    docstring): LSTM token evaluations (one trial sentence per position-move, the rest found in its memo)
    plus ``rho`` times BiLSTM token evaluations (the trial and the current sentence per move); ``burn`` adds
    a reverse start's sweeps at beta = 1 (BiLSTM only)."""
    s1, s2 = sum(lengths), sum(v * v for v in lengths)
    lm = n * (2 * s1 + (temps - 1) * trials * sweeps * s2)
    energy = n * (s1 + (temps - 1) * (2 * s1 + (trials + 1) * sweeps * s2))
    if burn:
        energy += n * (s1 + burn * sweeps * (trials + 1) * s2)
    return lm + rho * energy


def independence_work(n: int, groups: list[list[int]], temps: int, steps: int, rho: float, sigma: float,
                      burn: int = 0) -> float:
    """AIS cost on a neural TRF with the ``independence`` kernel and the :class:`TrimmedLM` proposal, ``n``
    chains per length, the lengths of each group in one call (module docstring): LSTM token evaluations
    (each proposed sentence scored once; the current ones come from the memo) plus ``rho`` times BiLSTM ones
    (the proposal at each step, and the chains at each temperature's kernel start and slope) plus ``sigma``
    times sampled LSTM tokens (a group's draw runs to its longest length for every row). Forward
    (``burn = 0``): the base draw and its scores, then ``(temps - 1) steps`` steps. Reverse (``burn`` > 0):
    the start sentences scored, ``burn steps`` steps at beta = 1, then the same ``(temps - 1) steps``."""
    s1 = sum(v for g in groups for v in g)
    drawn = sum(len(g) * max(g) for g in groups if g)  # sampled tokens per chain and draw
    moves = ((temps - 1) + burn) * steps  # kernel steps per chain
    lm = n * (s1 + moves * s1) + sigma * n * ((0 if burn else drawn) + moves * drawn)
    energy = n * (s1 + (temps - 1) * 2 * s1 + moves * s1 + (s1 if burn else 0))
    return lm + rho * energy


def kernel_steps(args: argparse.Namespace) -> int:
    """Kernel steps per temperature: ``--sweeps`` for the independence kernel (the unigram and class kernels
    make their sweeps inside one step)."""
    return args.sweeps if args.kernel == "independence" else 1


def work(d: dict[str, Any], args: argparse.Namespace, n: int, groups: list[list[int]], temps: int, *,
         burn: int = 0) -> float:
    """Cost of AIS with ``n`` chains per length over ``groups`` at ``temps``: position-moves (discrete TRF;
    with the independence kernel, sentence-tokens: the same count), :func:`neural_work` or
    :func:`independence_work` units (neural TRF); ``burn`` > 0 for a reverse run (its start's sweeps included)."""
    lengths = [v for g in groups for v in g]
    if "neural" in d and args.kernel == "independence":
        nd = d["neural"]
        return independence_work(n, groups, temps, args.sweeps, nd["rho"], nd["sigma"], burn)
    if "neural" in d:
        return neural_work(n, lengths, temps, args.sweeps, args.trials, d["neural"]["rho"], burn)
    return reverse_moves(n, lengths, temps, args.sweeps, burn) if burn else forward_moves(n, lengths, temps,
                                                                                          args.sweeps)


def batches(x: Sequences) -> list[Sequences]:
    """``x`` in length-sorted batches of 256 sentences (a BiLSTM over a whole test set at once would hold its
    ``(B, T, 2H)`` states)."""
    return sentence_batches(x, 256, shuffle=False)


def model_samples(trf: TRF, kernel: Sampler, test: Sequences, lengths: list[int], n: int, burn: int,
                  g: torch.Generator, *, steps: int = 1) -> Sequences:
    """``n`` test sentences per length (cycled), then ``burn x steps`` kernel steps under the model at fixed
    length (padded to ``L`` for the single-position kernels, to the longest of ``lengths`` for the independence
    one)."""
    rows = []
    for ell in lengths:
        at = (test.lengths == ell).nonzero().squeeze(1)
        rows.append(at[torch.arange(n) % at.numel()])
    x = test[torch.cat(rows)].canonical()
    x = x.pad_to(trf.space.max_length if isinstance(kernel, TransDimensional) else max(lengths))
    state = kernel.init(trf, x)
    with torch.no_grad():
        for _ in range(burn * steps):
            state, _ = kernel.step(trf, state, generator=g)
    return kernel.target(state)


def ppl(trf: TRF, test: Sequences, log_z: Any) -> float:
    with torch.no_grad():
        return trf_perplexity(trf, batches(test), log_z=log_z).reestimated.perplexity


def make_kernel(args: argparse.Namespace, d: dict[str, Any]) -> Sampler:
    """The AIS kernel of ``--kernel``: ``TransDimensional(jump=False)`` moves (unigram, class), or the
    independence sampler from the AIS proposal ``d["proposal"]`` itself (whole sentences of each chain's length)."""
    if args.kernel == "independence":
        return MetropolisIndependence(d["proposal"], space=d["trf"].space)
    if args.kernel == "class" and "neural" in d:
        raise SystemExit("--kernel class: a neural TRF has no word classes; use --kernel unigram")
    if args.kernel == "class" and d["classes"] is None:
        raise SystemExit("--kernel class: the model has no word classes (trf.classes = 0); use --kernel unigram")
    return TransDimensional(token_probs=d["unigram"] / d["unigram"].sum(), jump=False, sweeps=args.sweeps,
                            classes=d["classes"] if args.kernel == "class" else None, trials=args.trials)


def chosen_lengths(args: argparse.Namespace, test: Sequences, max_length: int) -> list[int]:
    """The estimated lengths: ``--lengths`` (each must have a test sentence) or the test set's (quick: every 4th)."""
    have = sorted(set(test.lengths.tolist()))
    if args.lengths is None:
        return have[::4 if args.quick else 1]
    try:
        want = sorted({int(v) for v in args.lengths.split(",")})
    except ValueError:
        raise SystemExit(f"--lengths: expected integers separated by commas; got {args.lengths!r}") from None
    bad = [n for n in want if n not in have or not 1 <= n <= max_length]
    if bad:
        raise SystemExit(f"--lengths: no test sentence of length {bad[:8]} (test lengths {have[0]}..{have[-1]}, "
                         f"model lengths 1..{max_length})")
    return want


def main() -> None:
    t_start = time.perf_counter()
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    check_sources(args)
    ks = None if args.temps_list is None else parse_temps(args.temps_list)
    counts = None if ks is None else convergence_counts(args)
    if args.neural is not None:
        d = build_neural(args.neural, args.neural_kind, args.quick)
    else:
        d = build_run(args.run) if args.run is not None else build(args.quick, args.model)
        d["proposal"] = LengthConditionalLM(d["kn"])
    d["build_s"] = time.perf_counter() - t_start
    d["trf"].eval()
    if ks is None:
        compare(args, d)
    else:
        assert counts is not None
        converge(args, d, ks, counts, t_start)


def check_sources(args: argparse.Namespace) -> None:
    """At most one of ``--model``, ``--run``, ``--neural`` (one line naming them); ``--neural-kind`` only with
    ``--neural`` (default dnce); ``--group`` defaults to 15, or :data:`NEURAL_GROUP` with ``--neural``."""
    given = [f for f, v in (("--model", args.model), ("--run", args.run), ("--neural", args.neural)) if v is not None]
    if len(given) > 1:
        raise SystemExit(f"{', '.join(given)}: expected one model; got {'both' if len(given) == 2 else 'all three'}")
    if args.neural is None and args.neural_kind is not None:
        raise SystemExit(f"--neural-kind: expected it with --neural DIR; got --neural-kind {args.neural_kind} alone")
    args.neural_kind = args.neural_kind or "dnce"
    if args.name is not None and (args.temps_list is None or not re.fullmatch(r"[a-z0-9_]+", args.name)):
        raise SystemExit(f"--name: expected lower-case letters, digits and _ with --temps-list; got {args.name!r}"
                         + ("" if args.temps_list is not None else " without --temps-list"))
    if args.group is None:
        args.group = 15 if args.neural is None else NEURAL_GROUP


def convergence_counts(args: argparse.Namespace) -> tuple[int, int]:
    """``(chains, reverse)`` per length of the convergence table (quick: 4, 2; else 10, 5)."""
    chains = args.chains or (4 if args.quick else 10)
    reverse = (2 if args.quick else 5) if args.reverse is None else args.reverse
    if chains < 2 or reverse == 1 or reverse < 0:
        raise SystemExit(f"--chains, --reverse: expected chains >= 2 and reverse 0 or >= 2; got {chains}, {reverse}")
    return chains, reverse


def compare(args: argparse.Namespace, d: dict[str, Any]) -> None:
    """IS vs forward (and reverse) AIS per length at ``--temps`` temperatures (module docstring)."""
    recorder = SR.start(BENCH, args, seeds=(args.seed,))
    q = args.quick
    is_draws = args.is_draws or (20 if q else 100)
    chains, temps = args.chains or (4 if q else 10), args.temps or (4 if q else 80)
    if args.reverse is None:
        args.reverse = 2 if q else 5
    info = C.machine_info()
    g = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    trf, test, V = d["trf"], d["test"], d["vocab_size"]
    build_s = d["build_s"]
    lengths = chosen_lengths(args, test, trf.max_length)
    proposal = d["proposal"]
    C.note(f"[{BENCH}] V = {V}, {model_words(d)}, trained steps {d['steps']}, {len(lengths)} lengths; proposal "
           f"{proposal!r}; built in {build_s:.0f} s")

    t0 = time.perf_counter()
    with torch.no_grad():
        est_is = importance_log_z_per_length(trf, proposal, is_draws, lengths=lengths, generator=g, batch_size=4096)
    is_s = time.perf_counter() - t0
    C.note(f"[{BENCH}] IS {is_draws}/length: {is_s:.0f} s")

    kernel = make_kernel(args, d)
    betas = linear_betas(temps) if args.schedule == "linear" else sigmoid_betas(temps)
    per_group = args.group or len(lengths)
    groups = [lengths[i:i + per_group] for i in range(0, len(lengths), per_group)]
    fwd: dict[int, Any] = {}
    group_s: list[dict[str, Any]] = []
    t_ais = time.perf_counter()
    for grp in groups:
        if args.budget is not None and time.perf_counter() - t_ais > args.budget:
            C.note(f"[{BENCH}] budget reached: AIS skipped for lengths {grp[0]}..{lengths[-1]}")
            break
        t1 = time.perf_counter()
        target = None
        if args.reverse:
            target = model_samples(trf, kernel, test, grp, args.reverse, args.burn, g, steps=kernel_steps(args))
        t2 = time.perf_counter()
        with torch.no_grad():
            r = ais_log_z_per_length(trf, proposal, chains, betas, lengths=grp, kernel=kernel, target_samples=target,
                                     steps_per_temperature=kernel_steps(args), generator=g,
                                     batch_size=chains * len(grp) + args.reverse * len(grp))
        t3 = time.perf_counter()
        fwd.update(zip(r.lengths, r.estimates))
        moves = (chains + args.reverse) * sum(grp) * (temps - 1) * args.sweeps
        group_s.append({"lengths": grp, "seconds": t3 - t1, "burn_s": t2 - t1, "ais_s": t3 - t2,
                        "position_moves_per_s": moves / (t3 - t2)})
        C.note(f"[{BENCH}] AIS lengths {grp[0]}..{grp[-1]}: {t3 - t1:.0f} s ({moves / (t3 - t2):.0f} moves/s)")
    ais_s = time.perf_counter() - t_ais
    done = sorted(fwd)

    rows, per_length = [], {}
    for n in done:
        a, i = fwd[n], est_is[n]
        st = a.settings
        rev = st.get("reverse")
        rows.append([n, i.estimate, i.stderr, i.ess, a.estimate, a.stderr, a.ess, a.estimate - i.estimate,
                     (a.estimate - i.estimate) / math.hypot(a.stderr, i.stderr) if a.stderr + i.stderr > 0 else 0.0,
                     rev, None if rev is None else a.upper - a.lower])
        per_length[n] = {"is": i.estimate, "is_stderr": i.stderr, "is_ess": i.ess, "ais": a.estimate,
                         "ais_stderr": a.stderr, "ais_ess": a.ess, "reverse": rev,
                         "reverse_stderr": st.get("reverse_stderr"), "reverse_ess": st.get("reverse_ess"),
                         "lower": a.lower, "upper": a.upper, "crossed": st.get("crossed")}
    what = (f"TRF of {args.run} (checkpoint step {d['steps']})" if args.run is not None else
            model_words(d) if "neural" in d else
            f"{'trained (' + str(d['steps']) + ' steps)' if d['steps'] else 'KN-initialised'} PTB TRF"
            f"{' (quick subset)' if q else ''}")
    sweep = "step" if args.kernel == "independence" else "sweep"
    print(f"log Z_l of the {what}: IS {is_draws}/length vs forward AIS {chains} "
          f"chains x {temps} temperatures x {args.sweeps} {sweep}(s), {args.kernel} kernel, {args.trials} trial(s)"
          + (f", reverse {args.reverse}/length after {args.burn} burn-in sweeps" if args.reverse else ""))
    print(C.format_table(["l", "IS", "se", "ESS", "AIS", "se", "ESS", "AIS-IS", "z", "reverse", "bracket"], rows))

    keep = torch.isin(test.lengths, torch.tensor(done or [0]))
    sub = test[keep.nonzero().squeeze(1)]
    figures: dict[str, Any] = {}
    if done:
        est_ais = LengthLogZ(tuple(done), tuple(fwd[n] for n in done), "ais")
        figures = {"sentences": sub.batch_size, "is": ppl(trf, sub, est_is), "ais": ppl(trf, sub, est_ais)}
        if "neural" in d:
            figures["lstm_exact"] = lstm_ppl(d, sub)
        if args.reverse and all(fwd[n].lower is not None for n in done):
            figures.update(bracket_perplexity(trf, sub, fwd, done))
    brackets = [r[-1] for r in rows if r[-1] is not None]
    crossed = sum(bool(v["crossed"]) for v in per_length.values())
    print(C.format_table(["figure", "value"], [
        ["test sentences at the AIS lengths", figures.get("sentences")],
        ["perplexity, IS log Z_l", figures.get("is")], ["perplexity, forward AIS log Z_l", figures.get("ais")],
        *([["LSTM (the proposal), exact perplexity", figures.get("lstm_exact")]] if "neural" in d else []),
        ["perplexity at the bracket's lower / upper log Z_l",
         f"{figures['bracket_lower']:.2f} / {figures['bracket_upper']:.2f}" if "bracket_upper" in figures else None],
        ["median / max bracket width (nats)", None if not brackets else
         f"{sorted(brackets)[len(brackets) // 2]:.3f} / {max(brackets):.3f}"],
        ["reverse below forward (crossed) at", f"{crossed} of {len(done)} lengths" if args.reverse else None],
        ["IS ESS median / min", f"{sorted(r[3] for r in rows)[len(rows) // 2]:.1f} / {min(r[3] for r in rows):.1f}"
         if rows else None],
        ["AIS ESS median / min", f"{sorted(r[6] for r in rows)[len(rows) // 2]:.1f} / {min(r[6] for r in rows):.1f}"
         if rows else None],
        ["|AIS - IS| / se: max", max((abs(r[8]) for r in rows), default=None)],
        ["IS seconds (all lengths)", is_s], ["AIS seconds (done lengths)", ais_s],
        ["AIS seconds per length", ais_s / max(len(done), 1)],
        ["AIS position-moves/s", sum(r["position_moves_per_s"] * r["ais_s"] for r in group_s) / max(
            sum(r["ais_s"] for r in group_s), 1e-9)]]))
    summary = {"bench": BENCH, "quick": q, "threads": info["threads"], "trained_steps": d["steps"],
               "lengths": len(lengths), "ais_lengths": len(done), "chains": chains, "temps": temps,
               "sweeps": args.sweeps, "kernel": args.kernel, "trials": args.trials, "reverse": args.reverse,
               "ppl_is": None if not done else round(figures["is"], 3),
               "ppl_ais": None if not done else round(figures["ais"], 3),
               "ppl_bracket": None if "bracket_upper" not in figures else
               [round(figures["bracket_lower"], 3), round(figures["bracket_upper"], 3)],
               "max_abs_z_ais_vs_is": None if not rows else round(max(abs(r[8]) for r in rows), 2),
               "is_s": round(is_s, 1), "ais_s": round(ais_s, 1), "ais_s_per_length": round(ais_s / max(len(done), 1), 2)}
    if "neural" in d:
        summary.update(neural=d["neural"]["kind"], ppl_lstm_exact=None if not done else round(figures["lstm_exact"], 3))
    record = {"bench": BENCH, "quick": q, "machine": info, "summary": summary,
              "settings": {**vars(args), "run": None if args.run is None else str(args.run),
                           "neural": None if args.neural is None else str(args.neural), "is_draws": is_draws,
                           "chains": chains, "temps": temps},
              "per_length": per_length, "perplexity": figures, "groups": group_s, "build_s": build_s,
              "run": d.get("run")}
    name = BENCH + (neural_name(d) if "neural" in d else "_run" if args.run is not None else
                    "_trained" if d["steps"] else "")
    path = C.save_results(("quick/" if q else "") + name, record, enabled=not args.no_save)
    if path is not None:
        C.note(f"[{BENCH}] wrote {path}")
    from neural_trf_lstm import commit_record

    commit_record(recorder, args, record, name=name, notes=(
        "log Z_l of a TRF on PTB by importance sampling and by forward AIS (and reverse AIS, a bracket) from the "
        "same length-conditional proposal (the KN n-gram of the model's order; for a neural TRF the saved LSTM), "
        "per length with stderr and ESS, and the test perplexity each gives. Forward estimates are lower bounds in expectation; a reverse run started from test sentences is "
        "an upper bound only when those are draws of the model. Seconds are wall-clock on the machine named "
        "here."))
    C.emit_final_line(summary)


def model_words(d: dict[str, Any]) -> str:
    """The model in a few words: its features, or the neural TRF's kind and folder."""
    if "neural" in d:
        nd = d["neural"]
        return f"neural TRF ({nd['kind'].upper()}, BiLSTM energy, {d['steps']} steps) of {nd['dir']}"
    return f"{d['trf'].field.num_features} features"


def neural_name(d: dict[str, Any]) -> str:
    """``_neural_<kind>`` plus the folder's ``_cf<C>``: the suffix of a neural TRF's record names."""
    return f"_neural_{d['neural']['kind']}{d['neural']['suffix']}"


def lstm_ppl(d: dict[str, Any], sub: Sequences) -> float:
    """The saved LSTM's exact perplexity on ``sub`` (``</s>`` counted, as ``trf_perplexity`` counts it)."""
    return lm_perplexity(d["neural"]["lstm"], batches(sub)).perplexity


def bracket_perplexity(trf: TRF, sub: Sequences, ests: dict[int, Any], done: list[int]) -> dict[str, float]:
    """Perplexity with every ``log Z_l`` at its bracket's lower and at its upper end."""
    out = {}
    for end in ("lower", "upper"):
        full = torch.zeros(trf.space.max_length, dtype=torch.float64)
        for n in done:
            full[n - 1] = getattr(ests[n], end)
        out[f"bracket_{end}"] = ppl(trf, sub, LengthLogZ.exact(full))
    return out


# -- the convergence table (--temps-list) ---------------------------------------------------------------------

def forward_moves(chains: int, lengths: list[int], temps: int, sweeps: int) -> int:
    """Position-moves of forward AIS: one per position, chain, transition (``temps - 1``) and sweep."""
    return chains * sum(lengths) * (temps - 1) * sweeps


def reverse_moves(n: int, lengths: list[int], temps: int, sweeps: int, burn: int) -> int:
    """Position-moves of reverse AIS from ``n`` samples per length, their ``burn`` sweeps included."""
    return n * sum(lengths) * (temps - 1 + burn) * sweeps


def plan_step(remaining: float | None, forward_s: float, reverse_s: float, next_s: float | None) -> str:
    """What to do at one K, given the predicted seconds of its forward run, of its reverse run, and of the
    next K with its reverse run (``None``: no next K); ``remaining``: seconds left (``None``: no budget).

    Returns ``"more"`` (forward only; the next K, reverse included, still fits after it), ``"last"`` (forward
    and reverse here, then stop), ``"last, no reverse"`` (only the forward run fits) or ``"not run"``.
    """
    if next_s is not None and (remaining is None or forward_s + next_s <= remaining):
        return "more"
    if remaining is None or forward_s + reverse_s <= remaining:
        return "last"
    return "last, no reverse" if forward_s <= remaining else "not run"


def stops_moving(rows: list[dict[str, Any]], z: float = Z95) -> tuple[list[dict[str, Any]], str]:
    """Successive perplexities against their combined interval, and the verdict.

    ``rows``: ``{"K", "ppl", "se"}`` of the completed K, increasing (``se`` of the perplexity, delta
    method). Each pair gives ``change = ppl_2 - ppl_1`` and ``half = z sqrt(se_1^2 + se_2^2)``; the table
    has stopped moving at the first K from which every later change is within its ``half``.
    """
    pairs = []
    for a, b in zip(rows, rows[1:]):
        change, half = b["ppl"] - a["ppl"], z * math.hypot(a["se"], b["se"])
        within = abs(change) <= half
        pairs.append({"from": a["K"], "to": b["K"], "change": change, "half_width": half, "within": within,
                      "words": f"K {a['K']} -> {b['K']}: changed by {change:+.2f} ({a['ppl']:.2f} -> {b['ppl']:.2f}), "
                               f"{'within' if within else 'outside'} the combined {100 * math.erf(z / 2 ** 0.5):.0f} % "
                               f"interval (+-{half:.2f})"})
    if len(rows) < 2:
        return pairs, "fewer than two temperatures completed: no convergence criterion"
    since = len(pairs)
    while since > 0 and pairs[since - 1]["within"]:
        since -= 1
    if since == len(pairs):
        return pairs, (f"still moving: the last change (K {pairs[-1]['from']} -> {pairs[-1]['to']}) is outside the "
                       "combined interval; more temperatures are needed")
    return pairs, (f"stopped moving at K = {rows[since]['K']}: every later change is within the combined interval "
                   "(the intervals rest on the forward stderr: trust them only where the ESS is not tiny)")


def kn5_record() -> dict[str, Any] | None:
    """ebms's own KN5 test perplexity, from ``benchmarks/records/kn5_ptb.json`` when it exists."""
    path = RECORDS_DIR / "kn5_ptb.json"
    if not path.is_file():
        return None
    runs = json.loads(path.read_text()).get("figures", {}).get("run", {})
    for run in runs.values():
        test = run.get("figures", {}).get("test", {})
        if "perplexity" in test:
            return {"value": test["perplexity"], "source": "benchmarks/records/kn5_ptb.json"}
    return None


def run_temps(d: dict[str, Any], kernel: Sampler, proposal: Any, groups: list[list[int]], chains: int,
              temps: int, args: argparse.Namespace, *, reverse: int, deadline: float | None, rate: float
              ) -> dict[str, Any]:
    """Forward AIS (and, with ``reverse``, reverse AIS) at ``temps`` temperatures, group by group."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + temps)
    betas = linear_betas(temps) if args.schedule == "linear" else sigmoid_betas(temps)
    ests: dict[int, Any] = {}
    moves, status = 0, "run"
    t0, c0 = time.perf_counter(), time.process_time()
    for grp in groups:
        m = round(work(d, args, chains, [grp], temps) + (work(d, args, reverse, [grp], temps, burn=args.burn)
                                                          if reverse else 0))
        if deadline is not None and time.perf_counter() + m / rate > deadline:
            status = f"stopped before lengths {grp[0]}..: budget"
            break
        target = (model_samples(d["trf"], kernel, d["test"], grp, reverse, args.burn, g, steps=kernel_steps(args))
                  if reverse else None)
        with torch.no_grad():
            r = ais_log_z_per_length(d["trf"], proposal, chains, betas, lengths=grp, kernel=kernel,
                                     target_samples=target, steps_per_temperature=kernel_steps(args), generator=g,
                                     batch_size=(chains + reverse) * len(grp))
        ests.update(zip(r.lengths, r.estimates))
        moves += m
    return {"K": temps, "estimates": ests, "status": status, "moves": moves, "reverse": reverse,
            "seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


def converge(args: argparse.Namespace, d: dict[str, Any], ks: list[int], counts: tuple[int, int],
             t_start: float) -> None:
    """The convergence table over ``ks`` temperatures, the reverse bracket and the rows beside (module docstring)."""
    q, trf, test = args.quick, d["trf"], d["test"]
    chains, reverse = counts
    neural = d.get("neural")
    name = args.name or CONVERGENCE + ("" if neural is None else neural_name(d))
    recorder = Recorder(name, seeds=[args.seed])
    info = C.machine_info()
    lengths = chosen_lengths(args, test, trf.max_length)
    sub = test[torch.isin(test.lengths, torch.tensor(lengths)).nonzero().squeeze(1)]
    proposal, kernel = d["proposal"], make_kernel(args, d)
    per_group = args.group or len(lengths)
    groups = [lengths[i:i + per_group] for i in range(0, len(lengths), per_group)]
    with torch.no_grad():
        training = trf_perplexity(trf, batches(sub)).training
    deadline = None if args.budget is None else t_start + args.budget

    unit = "token-evals" if neural is not None else "sentence-tokens" if args.kernel == "independence" else \
        "position-moves"
    speed: dict[str, float] = {}
    if neural is None:
        probe_lengths, probe_temps = lengths[:: max(1, len(lengths) // 6)][:6], PROBE_TEMPS
    else:
        probe_lengths, probe_temps = [lengths[len(lengths) // 2]], NEURAL_PROBE_TEMPS
        speed = neural_speed(d, probe_lengths[0])
        neural["rho"], neural["sigma"] = speed["rho"], speed["sigma"]
    probe = run_temps(d, kernel, proposal, [probe_lengths], chains, probe_temps, args, reverse=0, deadline=None,
                      rate=1.0)
    rate = probe["moves"] / probe["seconds"]
    probe_fig = {"lengths": probe_lengths, "temps": probe_temps, "unit": unit, "moves": probe["moves"],
                 "seconds": probe["seconds"], "moves_per_s": rate, "moves_per_cpu_s": probe["moves"] / probe["cpu_s"],
                 **speed}
    plan = [{"K": k, "forward_moves": round(work(d, args, chains, groups, k)),
             "reverse_moves": round(work(d, args, reverse, groups, k, burn=args.burn)) if reverse else 0}
            for k in ks]
    C.note(f"[{name}] {len(lengths)} lengths (sum {sum(lengths)}), {sub.batch_size} test sentences, "
           f"{chains} chains, {args.kernel} kernel; probe: {rate:.0f} {unit}/s wall "
           f"({probe_fig['moves_per_cpu_s']:.0f} per CPU-s) at {len(probe_lengths)} length(s), K = {probe_temps}")
    if neural is not None:
        C.note(f"[{name}] at length {speed['length']} ({speed['batch']} sentences padded to L = {trf.max_length}): "
               f"BiLSTM energy {speed['energy_sentences_per_s']:.0f} sentences/s "
               f"({speed['energy_tokens_per_s']:.0f} tokens/s), LSTM proposal log q "
               f"{speed['proposal_sentences_per_s']:.0f} sentences/s ({speed['proposal_tokens_per_s']:.0f} tokens/s),"
               f" LSTM sampling {speed['sampling_sentences_per_s']:.0f} sentences/s "
               f"({speed['sampling_tokens_per_s']:.0f} tokens/s); {unit}: "
               + (f"LSTM tokens + {speed['rho']:.3f} x BiLSTM tokens + {speed['sigma']:.3f} x sampled LSTM tokens "
                  f"(a step draws and scores one sentence per chain under the LSTM and scores it under the BiLSTM)"
                  if args.kernel == "independence" else
                  f"LSTM tokens + {speed['rho']:.3f} x BiLSTM tokens (a position-move scores its trial sentence "
                  f"under the LSTM, trial and current under the BiLSTM)"))
    print(f"cost plan at {rate:.0f} {unit}/s (probe{'' if neural else '; conservative at large K'}), loaded in "
          f"{d['build_s']:.0f} s"
          + ("" if args.budget is None else f", budget {args.budget:.0f} s"))
    print(C.format_table(["K", f"forward {unit}", "forward s", f"reverse {unit} (at the last K)", "reverse s"], [
        [p["K"], p["forward_moves"], f"{p['forward_moves'] / rate:.0f}", p["reverse_moves"],
         f"{p['reverse_moves'] / rate:.0f}"] for p in plan]))
    total = sum(p["forward_moves"] for p in plan) + plan[-1]["reverse_moves"]
    print(f"all K, reverse at the largest: {total} {unit}, about {total / rate:.0f} s "
          f"({total / rate / 3600:.2f} h) at this rate", flush=True)

    results: list[dict[str, Any]] = []
    notes: list[str] = []
    for i, k in enumerate(ks):
        remaining = None if deadline is None else deadline - time.perf_counter()
        rev_s = plan[i]["reverse_moves"] / rate
        nxt = None if i + 1 == len(ks) else (plan[i + 1]["forward_moves"] + plan[i + 1]["reverse_moves"]) / rate
        step = plan_step(remaining, plan[i]["forward_moves"] / rate, rev_s, nxt)
        if step == "not run":
            break
        res = run_temps(d, kernel, proposal, groups, chains, k, args, reverse=reverse if step == "last" else 0,
                        deadline=deadline, rate=rate)
        results.append(res)
        if res["moves"]:
            rate = res["moves"] / res["seconds"]
        C.note(f"[{name}] K = {k}: {res['status']}, {res['seconds']:.0f} s, {rate:.0f} {unit}/s")
        if step == "last, no reverse":
            notes.append(f"reverse AIS not run: only the forward run at K = {k} fit in the budget")
        if step != "more" or res["status"] != "run":
            break
    if reverse and not any(r["reverse"] and r["status"] == "run" for r in results):
        notes.append("no reverse bracket (budget)")

    rows, table, per_k = [], [], {}
    for res in results:
        ests = res["estimates"]
        row: dict[str, Any] = {"K": res["K"], "status": res["status"], "moves": res["moves"],
                               "seconds": round(res["seconds"], 1), "cpu_s": round(res["cpu_s"], 1)}
        if res["status"] == "run":
            done = sorted(ests)
            est = LengthLogZ(tuple(done), tuple(ests[n] for n in done), "ais")
            with torch.no_grad():
                r = trf_perplexity(trf, batches(sub), log_z=est).reestimated
            ess = sorted(e.ess for e in est.estimates)
            lo, hi = r.interval(Z95)
            row.update(ppl=r.perplexity, se=r.stderr, low=lo, high=hi, ess_median=ess[len(ess) // 2], ess_min=ess[0])
            rows.append(row)
            per_k[str(res["K"])] = {"log_z": [round(e.estimate, 4) for e in est.estimates],
                                    "stderr": [round(e.stderr, 4) for e in est.estimates],
                                    "ess": [round(e.ess, 2) for e in est.estimates]}
        table.append(row)
    for k in ks[len(results):]:
        table.append({"K": k, "status": "not run (budget)"})
    pairs, verdict = stops_moving(rows)
    change = {p["to"]: p["words"].split(": ", 1)[1] for p in pairs}

    bracket: dict[str, Any] = {}
    last = next((r for r in reversed(results) if r["reverse"] and r["status"] == "run"), None)
    if last is not None:
        ests = last["estimates"]
        done = sorted(ests)
        bracket = {"K": last["K"], "reverse_per_length": reverse, "burn_sweeps": args.burn,
                   **bracket_perplexity(trf, sub, ests, done),
                   "crossed_lengths": sum(bool(ests[n].settings.get("crossed")) for n in done),
                   "width_nats_median": sorted(ests[n].upper - ests[n].lower for n in done)[len(done) // 2],
                   "lower": [round(ests[n].lower, 4) for n in done], "upper": [round(ests[n].upper, 4) for n in done]}

    what = (f"run {d['run']['dir']} step {d['steps']} of {d['run']['train_steps']}" if "run" in d
            else model_words(d) + ", proposal: its LSTM given the length" if neural is not None
            else f"TRF trained {d['steps']} steps" if d["steps"] else "KN-initialised TRF")
    sweep = "step" if args.kernel == "independence" else "sweep"
    print(f"\nAIS convergence, {what}: forward AIS {chains} chains/length, {args.schedule} schedule, {args.sweeps} "
          f"{sweep}(s) of the {args.kernel} kernel per temperature, {len(lengths)} lengths, {sub.batch_size} test "
          f"sentences; 95 % intervals (delta method on log PPL)")
    print(C.format_table(["K", "status", unit, "seconds", "PPL", "95% interval", "ESS median / min",
                          "vs previous K"], [
        [r["K"], r["status"], r.get("moves"), r.get("seconds"), None if "ppl" not in r else f"{r['ppl']:.2f}",
         None if "low" not in r else f"[{r['low']:.2f}, {r['high']:.2f}]",
         None if "ess_median" not in r else f"{r['ess_median']:.2f} / {r['ess_min']:.2f}", change.get(r["K"])]
        for r in table]))
    print(f"criterion: {verdict}")
    kn5 = None if neural is not None else kn5_record()
    beside = [training_row(d, training.perplexity)]
    if bracket:
        beside.append([f"TRF, reverse AIS bracket at K = {bracket['K']}",
                       f"[{bracket['bracket_lower']:.2f}, {bracket['bracket_upper']:.2f}]",
                       f"{reverse}/length after {args.burn * kernel_steps(args)} {sweep}s at beta = 1; crossed at {bracket['crossed_lengths']}"
                       f" of {len(lengths)} lengths"])
    extra: dict[str, Any] = {}
    if neural is not None:  # the LSTM, not KN5 or the published rows (those are the discrete TRF's)
        extra = neural_beside(d, sub, rows[-1] if rows else None)
        beside += extra.pop("rows")
    if kn5 is not None:
        beside.append(["KN5, ebms", f"{kn5['value']:.2f}", kn5["source"]])
    if neural is None:
        beside += [[label, f"{value:.2f}", f"published, row {row}"] for label, row, value in PUBLISHED.values()]
    print(C.format_table(["beside", "PPL", "source"], beside))
    if neural is None:
        print(f"published rows: {SOURCE_TABLE} (not measured here)")
    for n in notes:
        print(f"note: {n}")

    def num(v: Any) -> Any:
        return round(v, 4) if isinstance(v, float) and math.isfinite(v) else None if isinstance(v, float) else v

    final = rows[-1] if rows else {}
    zeta_ppl = neural is None or neural["kind"] == "nce"  # DNCE's zeta is not log Z_l: no perplexity
    summary = {"bench": name, "quick": q, "run": None if "run" not in d else d["run"]["dir"],
               "checkpoint_step": d["steps"], "chains": chains, "lengths": len(lengths), "temps": ks,
               "temps_run": [r["K"] for r in rows],
               "ppl_training_zeta": num(training.perplexity) if zeta_ppl else None,
               "ppl_ais_last": num(final.get("ppl")), "ppl_ais_last_interval": None if not final else
               [num(final["low"]), num(final["high"])], "ppl_bracket": None if not bracket else
               [num(bracket["bracket_lower"]), num(bracket["bracket_upper"])], "stopped_moving": verdict.startswith(
                   "stopped"), "seconds": round(time.perf_counter() - t_start, 1)}
    figures = {"summary": summary, "table": [{k: num(v) for k, v in r.items()} for r in table],
               "criterion": {"pairs": [{k: num(v) for k, v in p.items()} for p in pairs], "verdict": verdict},
               "bracket": {k: num(v) for k, v in bracket.items()}, "training_zeta": num(training.perplexity),
               "kn5_ebms": kn5, "probe": {k: num(v) for k, v in probe_fig.items()},
               "plan": plan, "notes": notes, "lengths": lengths, "per_temps": per_k, "sentences": sub.batch_size,
               "run": d.get("run"), "build_s": round(d["build_s"], 1)}
    notes_text = CONVERGENCE_NOTES
    if neural is None:
        figures["published"] = {k: {"label": a, "value": v, "source": f"{SOURCE_TABLE}, row {r}"}
                                for k, (a, r, v) in PUBLISHED.items()}
    else:
        summary.update(neural=neural["kind"], training_zeta_figure=num(training.perplexity),
                       training_zeta_is_perplexity=zeta_ppl, **{k: num(v) for k, v in extra.items()
                                                                if k.startswith("ppl_")})
        figures.update(training_zeta_is_perplexity=zeta_ppl, neural={k: num(v) for k, v in extra.items()},
                       folder=neural["dir"])
        notes_text = CONVERGENCE_NOTES.split(" published:")[0] + NEURAL_NOTES
    recorder.settings = {"chains": chains, "temps_list": ks, "reverse": reverse, "burn": args.burn,
                         "kernel": args.kernel, "trials": args.trials, "sweeps": args.sweeps, "schedule": args.schedule,
                         "group": args.group, "budget": args.budget, "lengths": args.lengths, "threads": args.threads,
                         "model": args.model, "run": None if args.run is None else str(args.run),
                         "neural": None if neural is None else neural["dir"],
                         "neural_kind": None if neural is None else neural["kind"]}
    path = C.save_results(("quick/" if q else "") + name, {**figures, "machine": info}, enabled=not args.no_save)
    if path is not None:
        C.note(f"[{name}] wrote {path}")
    if not (q or args.no_save):
        try:
            recorder.write(figures, notes=notes_text)
        except ValueError as e:  # above the size limit: keep the summaries, per-length values stay in results/
            C.note(f"[{name}] {e}: the record keeps the summaries only")
            small = {k: v for k, v in figures.items() if k not in ("per_temps", "plan", "lengths")}
            recorder.write({**small, "bracket": {k: v for k, v in bracket.items() if k not in ("lower", "upper")}},
                           notes=notes_text + " Per-length values: benchmarks/results/ only.")
    C.emit_final_line(summary)


def training_row(d: dict[str, Any], value: float) -> list[str]:
    """The "training zeta" row beside the table: a perplexity, except for DNCE, whose zeta is not log Z_l."""
    if "neural" not in d:
        return ["TRF, training zeta", f"{value:.2f}", "the model's own zeta"]
    if d["neural"]["kind"] == "nce":
        return ["TRF (NCE), training zeta", f"{value:.2f}", "the model's own zeta (NCE fits it to log Z_l)"]
    return ["TRF (DNCE), training zeta: NOT a perplexity", f"{value:.2f}",
            "its zeta settles at log Z_l + log pi_l - log pi_int,l (pi_int: the noise's length law)"]


def neural_beside(d: dict[str, Any], sub: Sequences, last: dict[str, Any] | None) -> dict[str, Any]:
    """Rows beside a neural TRF's table: the saved IS log Z_l's perplexity, and the LSTM's exact perplexity on
    the same sentences (recomputed) and as ``neural_trf_lstm`` saved it (its own test sentences)."""
    nd, trf = d["neural"], d["trf"]
    with torch.no_grad():
        r = trf_perplexity(trf, batches(sub), log_z=saved_is(d)).reestimated
    iv = r.interval(Z95)
    lstm = lstm_ppl(d, sub)
    saved = nd["lstm_record"].get("test_perplexity")
    rows = [["TRF, IS log Z_l saved with the model", f"{r.perplexity:.2f}" + ("" if iv is None else
                                                                                f" [{iv[0]:.2f}, {iv[1]:.2f}]"),
             f"neural_trf_lstm's importance sampling from the LSTM (ESS median "
             f"{nd['record'].get('ess_median', math.nan):.2f})"],
            ["LSTM (the proposal), exact", f"{lstm:.2f}", f"recomputed on these {sub.batch_size} sentences"]]
    if saved is not None:
        rows.append(["LSTM, exact, as saved", f"{saved:.2f}", f"{nd['dir']}/lstm.pt (its test sentences, "
                                                                f"{nd['lstm_record'].get('steps')} steps)"])
    out: dict[str, Any] = {"rows": rows, "ppl_saved_is": r.perplexity, "ppl_lstm_exact": lstm,
                           "ppl_lstm_saved": saved}
    if last is not None:
        out["ais_minus_lstm_ppl"] = last["ppl"] - lstm
    return out


CONVERGENCE_NOTES = (
    "Test perplexity of a TRF with log Z_l re-estimated by forward AIS at increasing temperatures K (same chains per "
    "length, a fresh generator per K), with 95 % delta-method intervals and the ESS of each length's AIS weights "
    "(median / min over lengths); criterion: successive perplexities within their combined interval. Forward AIS is "
    "a stochastic lower bound of log Z_l, so its perplexity is a stochastic lower bound too, and its stderr is too "
    "small when ESS is a small fraction of the chains. bracket: reverse AIS at the largest K run, from test sentences "
    "moved by burn_sweeps kernel sweeps at beta = 1 (approximate model samples: an upper bound only if they were "
    "exact). published: the source's own results table (not measured here). Seconds: wall-clock on this machine.")
NEURAL_NOTES = (
    " Neural TRF (BiLSTM energy) of a neural_trf_lstm.py --save folder: the AIS proposal is its LSTM given the length, "
    "the kernel the unigram one (each position-move scores 2 whole sentences under the BiLSTM and the LSTM) or the "
    "independence one (settings.kernel; each step draws one sentence per chain from the LSTM, scored by both); "
    "training_zeta_figure is the perplexity with the TRF's own zeta, a perplexity only for NCE (DNCE's zeta settles "
    "at log Z_l + log pi_l - log pi_int,l). Beside: the perplexity with the IS log Z_l saved with the model and the "
    "LSTM's exact perplexity on the same sentences. Costs in token-evals: LSTM token evaluations plus rho x BiLSTM "
    "ones (plus sigma x sampled LSTM tokens for the independence kernel; probe). Seconds: wall-clock on this "
    "machine.")


if __name__ == "__main__":
    main()
