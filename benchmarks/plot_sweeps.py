"""Plot images/s against batch size and against CPU workers from a sweeps JSON.

    python benchmarks/plot_sweeps.py benchmarks/sweeps_ring_2026-11-22.json benchmarks/sweeps_ring_2026-11-22.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, dst: str) -> None:
    d = json.load(open(src))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, key, xlabel in ((axes[0], "batch_size_at_16_workers", "batch size (16 workers)"),
                            (axes[1], "workers_at_batch_256", "DataLoader workers (batch 256)")):
        xs = sorted(int(k) for k in d[key])
        ax.plot(xs, [d[key][str(x)] for x in xs], "o-", color="#76b900", label="torchdali")
        ax.axhline(d["torchvision_16_workers_batch_256"], color="#888888", ls="--",
                   label="torchvision, 16 workers, batch 256")
        if "nvjpeg_hardware_decode_alone" in d:
            ax.axhline(d["nvjpeg_hardware_decode_alone"], color="#1f77b4", ls=":",
                       label="nvJPEG hardware decode alone (batch 256)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("images/s")
        ax.set_ylim(0, None)
        ax.legend(fontsize=8)
    fig.suptitle(d["device"], fontsize=9)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
