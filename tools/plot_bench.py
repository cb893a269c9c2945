"""Benchmark plots and tables.

History (``benchmarks/results/results.jsonl``, appended by ``make bench``):
a Markdown table per benchmark, newest run first, to ``docs/benchmarks.md``,
and the headline timing of each case over the runs to ``docs/benchmarks.png``::

    .venv/bin/python tools/plot_bench.py history [results.jsonl] [docs/benchmarks.md] [docs/benchmarks.png]

Scaling (``benchmarks/bench_blender.py`` calls :func:`plot`): ms per frame
against vertices, Drape and Blender's Cloth modifier, log-log::

    .venv/bin/python tools/plot_bench.py [out/bench_blender.jsonl] [out/bench_scaling.png]
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import results as bench_results  # noqa: E402

# The tag columns every history table starts with, then the case, then the figures.
_TAGS = ("timestamp", "commit", "cpu")
_CASE = ("scene", "simulator", "quality", "vertices", "substeps", "threads", "tethers", "stretch_limits",
         "stretch_solve", "self_collision")
# Figures a table shows when a record has them, headline first (the plot's y).
_FIGURES = ("ms_per_step_median", "ms_per_frame_median", "ms_per_step_median_quiet", "speedup",
            "detect_ms_median", "ms_per_frame_overhead", "compile_cold_s", "compile_warm_cache_s",
            "mean_edge_strain", "max_edge_strain", "host_calibration_ms")


def _points(records, simulator):
    pts = {}
    for r in records:
        if r.get("simulator") != simulator or "ms_per_frame_median" not in r:
            continue
        if r.get("self_collision") or r.get("search"):
            continue
        if simulator == "blender_cloth" and r.get("quality") != 5:
            continue
        if simulator == "drape" and r["scene"] != "scaling":
            continue
        pts[r["vertices"]] = r["ms_per_frame_median"]
    return sorted(pts.items())


def plot(records, png_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drape = _points(records, "drape")
    blender = _points(records, "blender_cloth")
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    if blender:
        ax.plot([v for v, _ in blender], [m for _, m in blender], "o-", color="#d0632b",
                label="Blender Cloth, quality 5")
    if drape:
        ax.plot([v for v, _ in drape], [m for _, m in drape], "s-", color="#2b7bd0",
                label="Drape (defaults)")
    for v, m in drape:
        b = dict(blender).get(v)
        if b:
            ax.annotate(f"{b / m:.0f}x", (v, m), textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.axhline(1000.0 / 24, color="grey", lw=0.8, ls="--")
    ax.text(drape[0][0] if drape else 1000, 1000.0 / 24 * 1.1, "real time at 24 fps", fontsize=8, color="grey")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("cloth vertices")
    ax.set_ylabel("ms per frame (24 fps)")
    ax.set_title("Hanging sheet with a swept sphere: time per frame")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(png_path) or ".", exist_ok=True)
    fig.savefig(png_path)
    plt.close(fig)
    return png_path


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "/")


def _figures(records):
    present = [k for k in _FIGURES if any(k in r for r in records)]
    return present[:7]


def history_tables(records):
    """Markdown: one table per benchmark (in name order), newest record first."""
    out = ["# Benchmark history", "",
           "Drawn by `tools/plot_bench.py history` from `benchmarks/results/results.jsonl`, which "
           "`make bench` appends to. Each row is one case of one run: when (UTC), the commit "
           "(`-dirty`: with uncommitted changes), the CPU. Times are medians in ms.", ""]
    by_bench = {}
    for r in records:
        by_bench.setdefault(r["bench"], []).append(r)
    for bench in sorted(by_bench):
        rows = sorted(by_bench[bench], key=lambda r: r.get("timestamp", ""), reverse=True)
        case = [k for k in _CASE if any(k in r for r in rows)]
        columns = list(_TAGS) + case + _figures(rows)
        out += [f"## {bench} (`make bench-{bench}`)", "",
                "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        out += ["| " + " | ".join(_cell(r.get(k)) for k in columns) + " |" for r in rows]
        out.append("")
    return "\n".join(out)


def _headline(record):
    for key in ("ms_per_step_median", "ms_per_frame_median"):
        if isinstance(record.get(key), (int, float)):
            return key, float(record[key])
    return None, None


def history_plot(records, png_path):
    """One panel per benchmark: each case's headline median over the runs."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {}
    for r in records:
        key, value = _headline(r)
        if key is None:
            continue
        label = " ".join(f"{k}={r[k]}" if isinstance(r[k], bool) else str(r[k])
                         for k in ("scene", "simulator", "quality", "vertices", "substeps", "tethers",
                                   "stretch_limits") if k in r)
        series.setdefault(r["bench"], {}).setdefault(label, []).append((r.get("timestamp", ""), value, key))
    benches = sorted(series) or ["(no timed records)"]
    fig, axes = plt.subplots(len(benches), 1, figsize=(12, 3.2 * len(benches)), dpi=100, squeeze=False)
    for ax, bench in zip(axes[:, 0], benches):
        for label, points in sorted(series.get(bench, {}).items()):
            points.sort()
            ax.plot([p[0][:16] for p in points], [p[1] for p in points], "o-", label=label[:100])
        ax.set_title(f"make bench-{bench}")
        ax.set_ylabel("ms (median)")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.tick_params(axis="x", labelrotation=20, labelsize=7)
        if series.get(bench):
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    os.makedirs(os.path.dirname(png_path) or ".", exist_ok=True)
    fig.savefig(png_path)
    plt.close(fig)
    return png_path


def history(src, md_path, png_path=None):
    """Draw the table (and the plot, when png_path is given) from a results
    file; a malformed line raises before anything is written."""
    records = bench_results.load(src)
    text = history_tables(records)
    os.makedirs(os.path.dirname(md_path) or ".", exist_ok=True)
    with open(md_path, "w") as fh:
        fh.write(text)
    if png_path:
        history_plot(records, png_path)
    return records


def main(argv):
    if len(argv) > 1 and argv[1] == "history":
        src = argv[2] if len(argv) > 2 else bench_results.RESULTS
        md = argv[3] if len(argv) > 3 else os.path.join(ROOT, "docs", "benchmarks.md")
        png = argv[4] if len(argv) > 4 else os.path.join(ROOT, "docs", "benchmarks.png")
        try:
            records = history(src, md, png)
        except (OSError, ValueError) as exc:
            print(f"plot_bench: {exc}; nothing written", file=sys.stderr)
            return 1
        print(f"{len(records)} records -> {md}, {png}")
        return 0
    src = argv[1] if len(argv) > 1 else os.path.join(ROOT, "out", "bench_blender.jsonl")
    dst = argv[2] if len(argv) > 2 else os.path.join(ROOT, "out", "bench_scaling.png")
    with open(src) as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    print(plot(records, dst))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
