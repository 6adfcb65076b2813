"""Subword language models on PTB from the command line, per word beside word-level runs at the same budget.

Trains, with ``ebms train`` in child processes (``OMP_NUM_THREADS`` as set, one by default), four runs on
Penn Treebank: a KN 5-gram and an LSTM on words, and the same two on ``--units`` BPE units fitted on the
training words (``language.level=subword``). The LSTMs get the same sizes, steps and batch size (the same
sentences; the subword model sees more tokens per sentence). Each run's ``eval.json`` gives its valid and
test perplexity; for the subword runs per unit and per word (the word runs' denominator: words + sentences),
so the per-word figures compare. Then ``ebms score`` of the subword LSTM on the test file must give the
total ``ebms eval`` gave. Writes ``benchmarks/records/subword_ptb.json`` (``--name``).

Example (about 20 minutes on one thread)::

    EBMS_DATA=/path/to/data python benchmarks/subword_ptb.py --steps 1000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import ROOT, Recorder  # noqa: E402

EBMS = [str(Path(sys.executable).with_name("ebms"))]  # the venv's entry point


def _run(argv: list[str], out: Path | None = None) -> float:
    print("$ ebms " + " ".join(argv), file=sys.stderr, flush=True)
    start = time.perf_counter()
    with open(out, "w") if out is not None else open(os.devnull, "w") as sink:
        subprocess.run([*EBMS, *argv], check=True, cwd=ROOT, stdout=sink)
    return time.perf_counter() - start


def _figures(run: Path) -> dict[str, dict[str, float]]:
    report = json.loads((run / "eval.json").read_text())["figures"]
    keep = ("perplexity", "perplexity_per_word", "tokens", "words", "sentences", "log_prob")
    out = {split: {k: f[k] for k in keep if k in f} for split, f in report.items()}
    vocab = json.loads((run / "vocab.json").read_text())
    out["vocabulary"] = {"size": len(vocab["tokens"]), "max_length": vocab["max_length"]}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--units", type=int, default=4000, help="BPE units (language.subword_units)")
    p.add_argument("--steps", type=int, default=1000, help="training steps of each LSTM")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--width", type=int, default=128, help="embedding and hidden units of the one-layer LSTMs")
    p.add_argument("--out-dir", default="runs/subword-ptb")
    p.add_argument("--name", default="subword_ptb")
    args = p.parse_args(argv)
    common = ["data.name=ptb", f"run.out_dir={args.out_dir}", "run.progress=false", "run.seed=0", "--overwrite"]
    sub = ["language.level=subword", f"language.subword_units={args.units}"]
    lstm = ["model.kind=lstm", f"lm.embedding_dim={args.width}", f"lm.hidden={args.width}", "lm.layers=1",
            "lm.tie_weights=true", "lm.dropout=0.1", f"train.steps={args.steps}", f"train.batch_size={args.batch_size}",
            "train.lr=0.003", "train.lr_schedule=cosine", "train.lr_final=0.05", "train.grad_clip=1.0",
            "train.log_every=100", f"train.checkpoint_every={args.steps}"]
    kn = ["model.kind=kn", "ngram.order=5"]
    runs = {"kn5_word": kn, "kn5_subword": [*kn, *sub], "lstm_word": lstm, "lstm_subword": [*lstm, *sub]}
    rec = Recorder(args.name, seeds=[0], settings={"units": args.units, "subword_model": "bpe", "lstm_steps": args.steps,
                                                   "batch_size": args.batch_size, "lstm_width": args.width,
                                                   "commands": {k: ["ebms", "train", *common, f"run.name={k}", *v]
                                                                for k, v in runs.items()},
                                                   "threads": os.environ.get("OMP_NUM_THREADS")})
    figures: dict[str, object] = {}
    out = ROOT / args.out_dir
    for name, keys in runs.items():
        wall = _run(["train", *common, f"run.name={name}", *keys])
        figures[name] = {**_figures(out / name), "wall_s": round(wall, 1)}
    test = Path(os.environ.get("EBMS_DATA", ROOT / "data")) / "ptb" / "ptb.test.txt"
    tsv = out / "lstm_subword-test.tsv"
    _run(["score", str(out / "lstm_subword"), str(test), "--out", str(tsv)])
    rows = [line.split("\t") for line in tsv.read_text().splitlines()[1:]]
    total = sum(float(r[1]) for r in rows)
    figures["score_lstm_subword_test"] = {"log_prob": total, "sentences": len(rows),
                                          "eval_log_prob": figures["lstm_subword"]["test"]["log_prob"]}  # type: ignore[index]
    rec.write(figures, notes=(
        "perplexity: per token of the run (words, or BPE units, </s> counted); perplexity_per_word: exp(-log p / "
        "(words + sentences)), the word runs' denominator, so the four compare on the same text. PTB's <unk> is a "
        "word of the word runs and the unit '▁<unk>' of the subword runs. The LSTMs: same width, steps, batch size "
        "(the same sentences). score_lstm_subword_test: the total of `ebms score` on ptb.test.txt beside eval's."))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
