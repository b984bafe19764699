#!/usr/bin/env python3
"""Turn one `dfi bench` result (JSON, schema dfi-bench/1) into a PNG.

    python3 bench/plot.py bench/out/fabric-bw-shm.json bench/out/fabric-bw-shm.png

One subplot per panel of the result. Numeric x axes (message sizes, thread counts) become lines
with markers, one per series, with the spread of the repetitions (min..max) as error bars;
category axes become grouped bars; panels marked "stacked" (parts of one whole over time) become
stacked areas of the medians. DFI series are solid, baselines dashed. Needs matplotlib
(Debian: python3-matplotlib; `scripts/dev bench` installs it).
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

DFI_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#17becf"]
BASELINE_COLORS = ["#d62728", "#ff7f0e", "#8c564b", "#7f7f7f"]


def byte_label(value, _pos=None):
    value = int(round(value))
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size and value % size == 0:
            return f"{value // size} {unit}"
    return f"{value} B"


def axis_label(axis):
    unit = axis.get("unit", "")
    unit = "µs" if unit == "us" else unit
    return f"{axis['label']} [{unit}]" if unit else axis["label"]


def colors_for(series):
    dfi = iter(DFI_COLORS * 4)
    base = iter(BASELINE_COLORS * 4)
    return [next(dfi) if s["role"] == "dfi" else next(base) for s in series]


def plot_numeric(ax, panel):
    series = panel["series"]
    for s, color in zip(series, colors_for(series)):
        points = sorted(s["points"], key=lambda p: p["x"])
        if not points:
            continue
        xs = [p["x"] for p in points]
        ys = [p["value"] for p in points]
        low = [p["value"] - p["min"] for p in points]
        high = [p["max"] - p["value"] for p in points]
        role = "DFI" if s["role"] == "dfi" else "baseline"
        ax.errorbar(xs, ys, yerr=[low, high], label=f"{s['name']} ({role})", color=color,
                    linestyle="-" if s["role"] == "dfi" else "--", marker="o" if s["role"] == "dfi" else "s",
                    markersize=4, capsize=3, linewidth=1.5)
    scale = panel["x"].get("scale", "linear")
    if scale == "log2":
        ax.set_xscale("log", base=2)
    elif scale == "log10":
        ax.set_xscale("log", base=10)
    if panel["x"].get("unit") == "B":
        ax.xaxis.set_major_formatter(FuncFormatter(byte_label))
        xs = sorted({p["x"] for s in series for p in s["points"]})
        ax.set_xticks(xs)
        ax.tick_params(axis="x", labelrotation=45)
    if panel["y"].get("scale") in ("log2", "log10"):
        # values that span decades (DFI next to a much slower baseline): a log axis keeps both readable
        ax.set_yscale("log", base=2 if panel["y"]["scale"] == "log2" else 10)
    else:
        ax.set_ylim(bottom=0)


def plot_stacked(ax, panel):
    """Series that are parts of one whole (per-consumer bandwidth over time): stacked areas."""
    series = [s for s in panel["series"] if s["points"]]
    xs = sorted({p["x"] for s in series for p in s["points"]})
    layers = []
    for s in series:
        by_x = {p["x"]: p["value"] for p in s["points"]}
        layers.append([by_x.get(x, 0.0) for x in xs])
    colors = (DFI_COLORS + BASELINE_COLORS) * 4
    ax.stackplot(xs, layers, labels=[s["name"] for s in series], colors=colors[:len(series)], alpha=0.85)
    ax.set_ylim(bottom=0)


def plot_categories(ax, panel):
    series = panel["series"]
    categories = []
    for s in series:
        for p in s["points"]:
            if p["x"] not in categories:
                categories.append(p["x"])
    # Per category, the bars of the series that have it, side by side around the tick.
    present = {c: [s["id"] for s in series if any(p["x"] == c for p in s["points"])] for c in categories}
    width = 0.8 / max(1, max(len(ids) for ids in present.values()) if present else 1)
    for s, color in zip(series, colors_for(series)):
        by_x = {p["x"]: p for p in s["points"]}
        xs, ys, low, high = [], [], [], []
        for c, category in enumerate(categories):
            if category not in by_x:
                continue
            ids = present[category]
            slot = ids.index(s["id"])
            p = by_x[category]
            xs.append(c + (slot - (len(ids) - 1) / 2) * width)
            ys.append(p["value"])
            low.append(p["value"] - p["min"])
            high.append(p["max"] - p["value"])
        role = "DFI" if s["role"] == "dfi" else "baseline"
        bars = ax.bar(xs, ys, width, yerr=[low, high], capsize=3, label=f"{s['name']} ({role})", color=color,
                      hatch=None if s["role"] == "dfi" else "//", edgecolor="black", linewidth=0.5)
        for bar, y in zip(bars, ys):
            ax.annotate(f"{y:.3g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7, xytext=(2, 2), textcoords="offset points")
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels([str(c) for c in categories], rotation=15, ha="right", fontsize=8)


def main(argv):
    if len(argv) != 3:
        print("usage: plot.py RESULT.json OUT.png", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        result = json.load(f)
    panels = result["panels"]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 5.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        if panel.get("stacked"):
            plot_stacked(ax, panel)
        elif panel["x"].get("scale") == "category" or any(
                isinstance(p["x"], str) for s in panel["series"] for p in s["points"]):
            plot_categories(ax, panel)
        else:
            plot_numeric(ax, panel)
        better = "higher" if panel["better"] == "higher" else "lower"
        ax.set_title(f"{panel['title']} ({better} is better)", fontsize=10)
        ax.set_xlabel(axis_label(panel["x"]))
        ax.set_ylabel(axis_label(panel["y"]))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    where = result["transport"] + (" in network namespaces" if result.get("netns") else "")
    quick = ", quick" if result.get("quick") else ""
    fig.suptitle(f"{result['title']}\n{result['scenario']}: {where}{quick}, median of {result['repeat']} "
                 f"repetition(s), {result['date']}", fontsize=11)
    machine = result["machine"]
    fig.text(0.01, 0.01, f"{machine['nproc']} CPUs, {machine['cpu']}, Linux {machine['kernel']} — "
             f"{result['command']}", fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 0.93))
    fig.savefig(argv[2], dpi=90)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
