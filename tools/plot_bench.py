"""Plot the scaling curve of benchmarks/bench_blender.py: ms per frame against
vertices, Drape and Blender's Cloth modifier, log-log, to out/bench_scaling.png.

    .venv/bin/python tools/plot_bench.py [out/bench_blender.jsonl] [out/bench_scaling.png]
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def main(argv):
    src = argv[1] if len(argv) > 1 else os.path.join(ROOT, "out", "bench_blender.jsonl")
    dst = argv[2] if len(argv) > 2 else os.path.join(ROOT, "out", "bench_scaling.png")
    with open(src) as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    print(plot(records, dst))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
