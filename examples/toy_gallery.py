"""Draw every 2-D toy set: samples on top, density (exact or histogram) below.

Usage::

    python examples/toy_gallery.py [OUT.png | --docs] [--n 5000] [--seed 0]

Writes ``runs/examples/toy_gallery.png`` by default (git ignores ``runs/``);
``--docs`` writes the figure in ``docs/data-and-evaluation.md``,
``docs/img/toy_gallery.png`` of the checkout, instead. Sets with a closed-form density show it
(normalised on the grid); the others show a 2-D histogram of 100,000 draws.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from ebms.data import TOY_NAMES, get_toy
from ebms.viz import new_figure, plot_energy, plot_samples, save_figure


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    docs_out = Path(__file__).resolve().parents[1] / "docs" / "img" / "toy_gallery.png"
    parser.add_argument("out", nargs="?", default=None,
                        help="output image (.png, .pdf, .svg; default runs/examples/toy_gallery.png)")
    parser.add_argument("--docs", action="store_true", help=f"write the documentation's figure, {docs_out}")
    parser.add_argument("--n", type=int, default=5000, help="points per scatter plot")
    parser.add_argument("--seed", type=int, default=0, help="generator seed")
    args = parser.parse_args(argv)
    if args.docs and args.out is not None:
        parser.error("give either OUT or --docs, not both")
    out_path = docs_out if args.docs else Path(args.out or "runs/examples/toy_gallery.png")

    fig = new_figure((2.4 * len(TOY_NAMES), 5.0))
    axes = fig.subplots(2, len(TOY_NAMES))
    for col, name in enumerate(TOY_NAMES):
        ds = get_toy(name)
        g = torch.Generator().manual_seed(args.seed)
        top, bottom = axes[0, col], axes[1, col]
        plot_samples(ds.sample(args.n, generator=g), ax=top, bounds=ds.bounds, size=1.0, alpha=0.4)
        top.set_title(name)
        if ds.has_density:
            plot_energy(ds.true_energy(), ds.bounds, resolution=200, ax=bottom, colorbar=False)
            bottom.set_title("exact density", fontsize="small")
        else:
            x = ds.sample(100_000, generator=g).numpy()
            (x0, x1), (y0, y1) = ds.bounds
            hist, _, _ = np.histogram2d(x[:, 0], x[:, 1], bins=100, range=[[x0, x1], [y0, y1]])
            bottom.imshow(hist.T, origin="lower", extent=(x0, x1, y0, y1), cmap="viridis")
            bottom.set_title("histogram of draws", fontsize="small")
        for ax in (top, bottom):
            ax.set_xticks([])
            ax.set_yticks([])
    out = save_figure(fig, out_path, dpi=100)
    print(out)
    return out


if __name__ == "__main__":
    main()
