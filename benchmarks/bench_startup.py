"""Startup benchmark: enabling Drape to the first simulated frame, with the
solver compiled in the background (scene/warmup.py), as an artist meets it.

    make bench-startup           (or: .venv/bin/python benchmarks/bench_startup.py [--runs N])

Each run is a fresh Blender process (the bpy module) that enables the
add-on, builds a 40x40 sheet with its top row pinned and a capsule, and
plays at 24 frames a second until the cloth has simulated a step
(tests/blender/test_warmup.py's "firstplay" probe). Cold: numba's cache
emptied before each run (the first play after installing); warm: the cache
the cold runs filled. One JSON line per case with medians over the runs:
first_frame_s (wall, enable to the first simulated frame), cpu_s (this
process and the compiling workers), longest_frame_s (the longest the UI
waited for one frame meanwhile).
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from common import emit  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROBE = ROOT / "tests" / "blender" / "test_warmup.py"


def first_play(cache, tmp):
    out = pathlib.Path(tmp) / f"firstplay-{len(os.listdir(tmp))}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH")}
    env.update(NUMBA_CACHE_DIR=str(cache), DRAPE_BACKGROUND_COMPILE="1")
    proc = subprocess.run([sys.executable, str(PROBE), "firstplay", "drape", str(out), "default"],
                          capture_output=True, text=True, env=env, cwd=tmp, timeout=900)
    if proc.returncode != 0 or not out.is_file():
        raise SystemExit("the first-play probe failed:\n" + (proc.stdout + proc.stderr)[-3000:])
    result = json.loads(out.read_text())
    if result["error"] or result["first_s"] is None:
        raise SystemExit(f"the cloth did not simulate: {result}")
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per case (default 3)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = pathlib.Path(tmp) / "numba_cache"
        rows = {"cold": [], "warm": []}
        for _ in range(args.runs):
            if cache.exists():
                subprocess.run(["rm", "-rf", str(cache)], check=True)
            cache.mkdir()
            rows["cold"].append(first_play(cache, tmp))
            rows["warm"].append(first_play(cache, tmp))
        for case, results in rows.items():
            emit(scene="first_play_40x40_capsule", case=case, runs=len(results),
                 first_frame_s=round(statistics.median(r["first_s"] for r in results), 3),
                 cpu_s=round(statistics.median(r["cpu_s"] + r["workers_cpu_s"] for r in results), 3),
                 longest_frame_s=round(statistics.median(r["longest_frame_s"] for r in results), 3),
                 first_frame_s_all=[round(r["first_s"], 3) for r in results])


if __name__ == "__main__":
    main()
