#!/usr/bin/env python3
"""Regenerate bench/RESULTS.md from the `dfi bench` results in bench/out/*.json.

    python3 bench/report.py                  # bench/out -> bench/RESULTS.md
    python3 bench/report.py --out DIR --results FILE

Every number in RESULTS.md comes from a JSON result (schema dfi-bench/1); nothing is typed by
hand. Per scenario and transport the newest full run is used; a quick run only when no full run
exists (and it is marked as such). Hand-written analysis (why DFI loses somewhere, what would fix
it) lives in bench/notes/<scenario>.md and is copied in verbatim below the scenario's tables.
Needs only the Python standard library.
"""

import argparse
import json
import os
import sys

SCHEMA = "dfi-bench/1"
PAR = 0.05  # |ratio - 1| below this counts as "on par"


def load_results(out_dir):
    results = []
    for name in sorted(os.listdir(out_dir)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(out_dir, name)
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            print(f"report: skipping {path}: {e}", file=sys.stderr)
            continue
        if data.get("schema") != SCHEMA:
            print(f"report: skipping {path}: schema is {data.get('schema')!r}, not {SCHEMA}", file=sys.stderr)
            continue
        data["_file"] = name
        results.append(data)
    return results


def pick(results):
    """One result per (scenario, transport, netns): full beats quick, then the newest."""
    chosen = {}
    for r in results:
        key = (r["scenario"], r["transport"], bool(r.get("netns")))
        rank = (not r.get("quick"), r.get("date", ""))
        if key not in chosen or rank > chosen[key][0]:
            chosen[key] = (rank, r)
    return [v[1] for v in chosen.values()]


def fmt(value):
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def x_text(x, axis):
    if isinstance(x, str):
        return x
    if axis.get("unit") == "B" and float(x).is_integer():
        b = int(x)
        for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
            if b >= size and b % size == 0:
                return f"{b // size} {unit}"
        return f"{b} B"
    unit = axis.get("unit", "")
    return f"{fmt(x)} {unit}".strip()


def unit_text(unit):
    return "µs" if unit == "us" else unit


def verdict(ratio, better):
    if abs(ratio - 1) < PAR:
        return "on par"
    dfi_better = ratio > 1 if better == "higher" else ratio < 1
    return "**DFI better**" if dfi_better else "**DFI worse**"


def target_text(ratio, target, better):
    if target is None:
        return ""
    met = ratio >= target if better == "higher" else ratio <= target
    sign = "≥" if better == "higher" else "≤"
    return f"{sign} {fmt(target)}×: {'met' if met else 'MISSED'}"


def point_lookup(series):
    return {json.dumps(p["x"]): p for p in series["points"]}


def spread(point):
    if point is None:
        return ""
    if len(point["samples"]) < 2:
        return fmt(point["value"])
    return f"{fmt(point['value'])} ({fmt(point['min'])}–{fmt(point['max'])})"


def stacked_table(panel):
    """A stacked panel (parts of one whole over time, e.g. per-consumer bandwidth per time bin) has
    too many points for a row each: one row per series with how many points it has and their
    spread; every point is in the JSON and the plot."""
    unit = unit_text(panel["y"]["unit"])
    x_unit = panel["x"].get("unit", "")
    lines = [f"**{panel['title']}** — {panel['y']['label']} in {unit} over {panel['x']['label']}, stacked; "
             "every point is in the JSON and the plot", "",
             f"| series | points | {panel['x']['label']} | median over the points | min–max over the points |",
             "|---|---|---|---|---|"]
    for s in panel["series"]:
        values = sorted(p["value"] for p in s["points"])
        xs = [p["x"] for p in s["points"]]
        if not values:
            lines.append(f"| {s['name']} | 0 | — | — | — |")
            continue
        middle = values[len(values) // 2] if len(values) % 2 else (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2
        lines.append(f"| {s['name']} | {len(values)} | {fmt(min(xs))}–{fmt(max(xs))} {x_unit} | {fmt(middle)} | "
                     f"{fmt(values[0])}–{fmt(values[-1])} |")
    return lines


def panel_table(panel):
    if panel.get("stacked"):
        return stacked_table(panel)
    unit = unit_text(panel["y"]["unit"])
    series = {s["id"]: s for s in panel["series"]}
    has_target = any("target" in r for r in panel["ratios"])
    lines = [f"**{panel['title']}** — {panel['y']['label']} in {unit}, {panel['better']} is better; "
             "value = median (min–max over repetitions)", ""]
    header = f"| {panel['x']['label']} | DFI | baseline | DFI / baseline | verdict |" + (" target |" if has_target else "")
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    compared = set()
    for r in panel["ratios"]:
        dfi, base = series[r["dfi"]], series[r["baseline"]]
        key = json.dumps(r["x"])
        compared.add((r["dfi"], key))
        row = (f"| {x_text(r['x'], panel['x'])} | {spread(point_lookup(dfi).get(key))} | "
               f"{base['name']}: {spread(point_lookup(base).get(key))} | {fmt(r['ratio'])}× | "
               f"{verdict(r['ratio'], panel['better'])} |")
        if has_target:
            row += f" {target_text(r['ratio'], r.get('target'), panel['better'])} |"
        lines.append(row)
    # DFI numbers without a baseline counterpart (shown, never silently dropped).
    for s in panel["series"]:
        if s["role"] != "dfi":
            continue
        for p in s["points"]:
            if (s["id"], json.dumps(p["x"])) in compared:
                continue
            row = f"| {x_text(p['x'], panel['x'])} | {spread(p)} | — | — | no baseline |"
            if has_target:
                row += " |"
            lines.append(row)
    return lines


def machine_text(m):
    text = f"{m['nproc']} CPUs, {m['cpu']}, Linux {m['kernel']}"
    if "loadavg" in m:
        text += f", load average {' / '.join(fmt(v) for v in m['loadavg'])} when written"
    return text


def section(r, out_rel):
    where = r["transport"] + (" in network namespaces" if r.get("netns") else "")
    title = f"### {where}" + (" (quick run: small sizes, not the data of record)" if r.get("quick") else "")
    lines = [title, ""]
    lines.append(f"- command: `{r['command']}`")
    lines.append(f"- date: {r['date']}; median of {r['repeat']} repetition(s); run took {fmt(r.get('seconds', 0))} s")
    lines.append(f"- machine: {machine_text(r['machine'])}")
    for b in r["baselines"]:
        lines.append(f"- baseline {b['name']}: {b['description']}")
    stem = os.path.splitext(r["_file"])[0]
    png = os.path.join(out_rel, stem + ".png")
    lines.append(f"- data: [`{out_rel}/{r['_file']}`]({out_rel}/{r['_file']})" +
                 (f", plot: [`{png}`]({png})" if r.get("_has_png") else ""))
    lines.append("")
    for panel in r["panels"]:
        lines += panel_table(panel)
        lines.append("")
    if r.get("notes"):
        lines.append("Notes recorded with the run:")
        lines += [f"- {n}" for n in r["notes"]]
        lines.append("")
    commands = []
    for panel in r["panels"]:
        for s in panel["series"]:
            for c in s.get("commands", []):
                if c not in commands:
                    commands.append(c)
    if commands:
        lines.append("<details><summary>Exact commands of this run</summary>")
        lines.append("")
        lines.append("```")
        lines += commands
        lines.append("```")
        lines.append("</details>")
        lines.append("")
    return lines


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(here, "out"), help="folder with the JSON results")
    parser.add_argument("--results", default=os.path.join(here, "RESULTS.md"), help="the Markdown file to write")
    parser.add_argument("--notes", default=os.path.join(here, "notes"), help="folder with <scenario>.md analyses")
    args = parser.parse_args(argv[1:])

    results = pick(load_results(args.out))
    for r in results:
        r["_has_png"] = os.path.exists(os.path.join(args.out, os.path.splitext(r["_file"])[0] + ".png"))
    out_rel = os.path.relpath(args.out, os.path.dirname(os.path.abspath(args.results)))
    lines = [
        "# DFI benchmark results",
        "",
        "<!-- Generated by bench/report.py from bench/out/*.json; do not edit by hand. -->",
        "",
        "Generated by `python3 bench/report.py` from the JSON results in "
        f"[`{out_rel}/`]({out_rel}/); every number below comes from those files. Each scenario ran "
        "DFI and its baseline in the same run on the same machine (see `bench/README.md`).",
        "",
        "Ratios are DFI / baseline. Where higher is better (bandwidth) a ratio above 1 means DFI is "
        "faster; where lower is better (latency, runtime) a ratio below 1 means DFI is faster. "
        f"\"On par\" means within ±{int(PAR * 100)} %. Values are medians over the repetitions, with "
        "min–max in parentheses: on a small shared machine the spread is part of the result.",
        "",
    ]
    if not results:
        lines += ["No results yet: run `scripts/dev bench` (see bench/README.md).", ""]
    scenarios = []
    for r in results:
        if r["scenario"] not in scenarios:
            scenarios.append(r["scenario"])
    for name in scenarios:
        group = sorted((r for r in results if r["scenario"] == name),
                       key=lambda r: (r["transport"], bool(r.get("netns"))))
        lines += [f"## {name} — {group[0]['title']}", "", group[0].get("description", ""), ""]
        for r in group:
            lines += section(r, out_rel)
        notes = os.path.join(args.notes, name + ".md")
        if os.path.exists(notes):
            with open(notes) as f:
                lines += [f"#### Analysis ({os.path.relpath(notes, os.path.dirname(os.path.abspath(args.results)))})",
                          "", f.read().strip(), ""]
    with open(args.results, "w") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    print(f"report: wrote {args.results} from {len(results)} result(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
