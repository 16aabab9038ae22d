"""Draws docs/congestion.png from the CSV of `cargo run --release -p emu-core --example
dcqcn_trace`: two senders into one 1 Gbit/s port, with DCQCN (top: each sender's paced
rate R_C and its throughput) and without (bottom: throughput).

    cargo run --release -p emu-core --example dcqcn_trace > /tmp/dcqcn.csv
    /usr/bin/python3 docs/congestion_plot.py /tmp/dcqcn.csv docs/congestion.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LINE_MBPS = 1000


def main(src, dst):
    series = {}
    with open(src, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["config"], int(row["sender"]))
            s = series.setdefault(key, {"t": [], "tput": [], "rate": []})
            s["t"].append(int(row["time_us"]) / 1000)
            s["tput"].append(int(row["throughput_mbps"]))
            s["rate"].append(int(row["rate_mbps"]) if row["rate_mbps"] else LINE_MBPS)
    fig, axes = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    for ax, config, title in [
        (axes[0], "dcqcn", "DCQCN on"),
        (axes[1], "off", "DCQCN off"),
    ]:
        for (c, sender), s in sorted(series.items()):
            if c != config:
                continue
            colour = colours[sender % len(colours)]
            ax.plot(s["t"], s["tput"], color=colour, lw=1.2,
                    label=f"sender {sender} throughput")
            if config == "dcqcn":
                ax.plot(s["t"], s["rate"], color=colour, lw=0.8, ls="--",
                        label=f"sender {sender} rate R_C")
        ax.set_title(f"{title}: two senders into a 1 Gbit/s port (marking 5-50 KB)")
        ax.set_ylabel("Mbit/s")
        ax.set_ylim(0, 1100)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    axes[1].set_xlabel("simulated time (ms)")
    fig.tight_layout()
    fig.savefig(dst, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
