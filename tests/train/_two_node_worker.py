"""Worker for test_two_node.py: ``torchrun ... _two_node_worker.py OUT MODE`` on four ranks, either two
launchers ("nodes") of two processes each (``MODE=nodes``) or one launcher of four (``MODE=one``).

Every run shares the folder ``OUT`` (two nodes on one machine see the same disk, as two machines
would see a shared file system). Runs, all through the process group torchrun set up once:

* ``cont``: ``ebms train`` on a 2-D toy (PCD with a replay buffer per rank, an MLP energy), 6 steps;
* ``lang``: ``ebms train`` of a small LSTM LM (dropout 0.3: the per-rank global RNG matters) on
  ``OUT/train.txt`` (``data.name=text``), 6 steps;
* ``nodes`` only: ``cont_split`` and ``lang_split`` (3 steps, then ``--resume`` to 6), ``cont_fsdp``
  (``cont`` with ``train.shard="fsdp"``), and ``lib``: the library :class:`~ebms.train.Trainer`
  on tensor data (exact Gaussian maximum likelihood, batch 8 per rank), whose final parameters
  rank 0 saves to ``OUT/lib.safetensors``.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from pathlib import Path

import safetensors.torch
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _train_helpers import GaussianML, make_data  # noqa: E402

from ebms.cli.main import main as ebms  # noqa: E402
from ebms.nets import GaussianEnergy  # noqa: E402
from ebms.train import Trainer  # noqa: E402

STEPS = 6
CONT = ["demo", "run.progress=false", "train.lr_schedule=constant", "model.hidden=[8]", "objective.k=2", "objective.buffer_size=64",
        "train.batch_size=8", "train.log_every=1", "train.checkpoint_every=3", "data.n_test=50", "--no-eval"]
LANG = ["lstm-ptb", "data.name=text", "run.progress=false", "lm.embedding_dim=8", "lm.hidden=8", "lm.dropout=0.3",
        "train.lr_schedule=constant", "train.batch_size=4", "train.log_every=1", "train.checkpoint_every=3", "--no-eval"]
BATCH = 8  # rows per rank per step of the library run
LIB = dict(steps=20, batch_size=BATCH, seed=3, log_every=2, checkpoint_every=None)


def train(out: Path, base: list[str], name: str, steps: int, *extra: str) -> None:
    paths = [f"language.train_path={out / 'train.txt'}"] if base is LANG else []
    args = ["train", *base, *paths, f"run.out_dir={out}", f"run.name={name}", f"train.steps={steps}", *extra]
    code = ebms(args)
    assert code == 0, (args, code)


def main() -> None:
    torch.set_num_threads(1)
    faulthandler.dump_traceback_later(400, exit=True)  # a hang fails the test instead of blocking it
    out, mode = Path(sys.argv[1]), sys.argv[2]
    assert os.environ["WORLD_SIZE"] == "4", os.environ["WORLD_SIZE"]
    tag = "" if mode == "nodes" else "_one"
    train(out, CONT, f"cont{tag}", STEPS)
    train(out, LANG, f"lang{tag}", STEPS)
    if mode != "nodes":
        return
    for base, name in ((CONT, "cont_split"), (LANG, "lang_split")):
        train(out, base, name, STEPS // 2)
        train(out, base, name, STEPS, "--resume")
    train(out, CONT, "cont_fsdp", STEPS, 'train.shard="fsdp"')
    t = Trainer(GaussianML(), GaussianEnergy(2), make_data(), optimizer=lambda g: torch.optim.Adam(g, lr=0.05),
                run_dir=None, progress=False, device="cpu", **LIB)  # type: ignore[arg-type]
    t.fit()
    if t.is_main:
        state = {f"model.{k}": v.contiguous() for k, v in t.model.state_dict().items()}
        safetensors.torch.save_file(state, out / "lib.safetensors")


if __name__ == "__main__":
    main()
