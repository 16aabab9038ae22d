"""Draws the congestion-control figures of docs/congestion.md.

docs/congestion.png, from the CSV of `cargo run --release -p emu-core --example
dcqcn_trace`: the simulation, two senders into one 1 Gbit/s port, with DCQCN (top: each
sender's paced rate R_C and its throughput) and without (bottom: throughput).

    cargo run --release -p emu-core --example dcqcn_trace > /tmp/dcqcn.csv
    /usr/bin/python3 docs/congestion_plot.py /tmp/dcqcn.csv docs/congestion.png

docs/congestion_e2e.png, with --e2e, from the CSV the end-to-end two-sender test writes
when RDMA_EMU_DCQCN_CSV names it (tests/tests/ecn.rs: two ib_write_bw senders through a
200 Mbit/s token bucket, CE marked above 12 MB/s; each sender's rate on the wire per
100 ms, DCQCN on and off):

    RDMA_EMU_DCQCN_CSV=/tmp/dcqcn_e2e.csv RDMA_EMU_BIN_DIR=$CARGO_TARGET_DIR/release \
        cargo test --release -p rdma-emu-tests --test ecn dcqcn_slows -- --test-threads=1
    /usr/bin/python3 docs/congestion_plot.py --e2e /tmp/dcqcn_e2e.csv docs/congestion_e2e.png
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


E2E_LINK_MBPS = 200
E2E_MARK_MBPS = 12 * 8 * 1.048576  # nftables' "12 mbytes/second" is MiB/s


def e2e(src, dst):
    series = {}
    with open(src, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["config"], int(row["sender"]))
            s = series.setdefault(key, {"t": [], "mbps": []})
            s["t"].append(int(row["time_ms"]) / 1000)
            s["mbps"].append(float(row["mbps"]))
    fig, axes = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    colours = ["tab:blue", "tab:orange"]
    for ax, config, title in [
        (axes[0], "dcqcn", "DCQCN on"),
        (axes[1], "off", "DCQCN off"),
    ]:
        total = {}
        for (c, sender), s in sorted(series.items()):
            if c != config:
                continue
            ax.plot(s["t"], s["mbps"], color=colours[sender % 2], lw=1.2,
                    label=f"sender {sender}")
            for t, v in zip(s["t"], s["mbps"]):
                total[t] = total.get(t, 0) + v
        ts = sorted(total)
        ax.plot(ts, [total[t] for t in ts], color="grey", lw=0.8, ls=":",
                label="both")
        ax.axhline(E2E_LINK_MBPS, color="black", lw=0.6, ls="--",
                   label="link (tbf 200 Mbit/s)")
        ax.axhline(E2E_MARK_MBPS, color="tab:red", lw=0.6, ls="--",
                   label="CE above, both together (nftables meter)")
        ax.set_title(f"{title}: two ib_write_bw senders over veth, "
                     "rate on the wire per 100 ms")
        ax.set_ylabel("Mbit/s")
        ax.set_ylim(0, 270)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper center", fontsize=7, ncol=3)
    axes[1].set_xlabel("time since the first packet (s)")
    fig.tight_layout()
    fig.savefig(dst, dpi=100)


if __name__ == "__main__":
    if sys.argv[1] == "--e2e":
        e2e(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1], sys.argv[2])
