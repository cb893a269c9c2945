#!/usr/bin/env python3
"""Time from enabling the installed Drape extension to its first simulated step.

    .venv/bin/python tools/measure_startup.py [--zip dist/drape-...-linux_x64.zip] [--cold 2] [--warm 5]

Builds this platform's zip with tools/build_extension.py (unless --zip is
given), installs it with Blender's installer into a scratch
BLENDER_USER_RESOURCES, then runs fresh processes that each import bpy (not
timed), enable the add-on and run one solver step on a sheet, with the venv's
numba hidden so the extension's bundled wheels are used, as in a user's Blender:

  first  the first process after install (also writes numba's own .pyc files)
  cold   numba's kernel cache (the extension's user folder) emptied before each run
  warm   the cache filled by the runs before
  numba_floor  no add-on: import numba + first call of a trivial kernel, the
         fixed cost any numba add-on pays (typing/target context set-up)

One JSON line per case (medians over the runs): enable_s (addon_enable),
solver_import_s (importing the solver: numba + kernel decoration),
first_step_s (build_model + the first step: compile or cache load), total_s.
"""

import argparse
import importlib
import json
import os
import pathlib
import platform as _platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = "bl_ext.user_default.drape"


def _child(mode, zip_path, grid):
    from import_guard import only_under  # tools/ is this script's folder

    only_under(("numba", "llvmlite", "drape"), os.environ["BLENDER_USER_RESOURCES"])
    import bpy

    if mode == "install":
        result = bpy.ops.extensions.package_install_files(filepath=zip_path, repo="user_default",
                                                          enable_on_install=False)
        print(json.dumps({"installed": sorted(result), "cache": bpy.utils.extension_path_user(
            PKG, path="numba_cache", create=False)}))
        return
    import numpy as np

    if mode == "floor":  # numba's own fixed cost: import + the first dispatch of a trivial kernel
        t0 = time.perf_counter()
        import numba

        t1 = time.perf_counter()
        numba.njit("int64(int64)")(lambda x: x + 1)(1)
        t2 = time.perf_counter()
        print(json.dumps({"enable_s": 0.0, "solver_import_s": t1 - t0, "first_step_s": t2 - t1,
                          "total_s": t2 - t0, "numba_file": numba.__file__,
                          "cache_dir": os.environ.get("NUMBA_CACHE_DIR", "")}))
        return
    t0 = time.perf_counter()
    bpy.ops.preferences.addon_enable(module=PKG)
    t1 = time.perf_counter()
    solver = importlib.import_module(PKG + ".solver")
    t2 = time.perf_counter()
    xs, ys = np.meshgrid(np.linspace(0, 1, grid), np.linspace(0, 1, grid))
    rest = np.stack([xs.ravel(), ys.ravel(), np.ones(grid * grid)], axis=1)
    quads = np.array([(j * grid + i, j * grid + i + 1, (j + 1) * grid + i + 1, (j + 1) * grid + i)
                      for j in range(grid - 1) for i in range(grid - 1)]).ravel()
    sizes = np.full((grid - 1) ** 2, 4)
    pin = np.zeros(grid * grid)
    pin[-grid:] = 1.0
    params = solver.ClothParams()
    model = solver.build_model(rest, quads, sizes, np.full(grid * grid, 0.2 / grid ** 2), pin, params)
    state = model.new_state()
    solver.step(model, state, solver.StepInputs(pin_targets=rest), 1 / 24, params)
    t3 = time.perf_counter()
    assert np.all(np.isfinite(state.positions_aos()))
    numba = sys.modules["numba"]
    print(json.dumps({"enable_s": t1 - t0, "solver_import_s": t2 - t1, "first_step_s": t3 - t2,
                      "total_s": t3 - t0, "numba_file": numba.__file__,
                      "cache_dir": numba.config.CACHE_DIR}))


def _run_child(mode, zip_path, grid, user):
    # Blender writes .pyc files (numba's own modules would compile from source
    # in every run otherwise), so a PYTHONDONTWRITEBYTECODE of the dev shell is dropped.
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    env["BLENDER_USER_RESOURCES"] = str(user)
    proc = subprocess.run([sys.executable, __file__, "--child", mode, str(zip_path), str(grid)],
                          capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        sys.exit(f"drape: the {mode} run failed: {' | '.join(tail)}")
    result = json.loads(lines[-1])
    result["load_avg_1min"] = os.getloadavg()[0]  # a shared machine: say how busy it was
    return result


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zip", type=pathlib.Path, help="an extension zip for this platform (default: build one)")
    parser.add_argument("--cold", type=int, default=2, help="cold runs (each recompiles the solver)")
    parser.add_argument("--warm", type=int, default=5, help="warm runs")
    parser.add_argument("--grid", type=int, default=24, help="sheet of grid x grid vertices")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="drape-startup-") as tmp:
        tmp = pathlib.Path(tmp)
        zip_path = args.zip
        if zip_path is None:
            machine = {"x86_64": "x64", "amd64": "x64", "arm64": "arm64", "aarch64": "arm64"}[
                _platform.machine().lower()]
            system = {"linux": "linux", "darwin": "macos", "windows": "windows"}[_platform.system().lower()]
            proc = subprocess.run([sys.executable, str(ROOT / "tools" / "build_extension.py"), "--platform",
                                   f"{system}-{machine}", "--output-dir", str(tmp / "dist")])
            if proc.returncode != 0:
                sys.exit(1)
            zip_path = next((tmp / "dist").glob("*.zip"))
        user = tmp / "user"
        user.mkdir()
        cache = pathlib.Path(_run_child("install", zip_path, args.grid, user)["cache"])

        runs = {"first": [_run_child("enable", zip_path, args.grid, user)]}
        runs["cold"] = []
        for _ in range(args.cold):
            shutil.rmtree(cache, ignore_errors=True)
            runs["cold"].append(_run_child("enable", zip_path, args.grid, user))
        runs["warm"] = [_run_child("enable", zip_path, args.grid, user) for _ in range(args.warm)]
        runs["numba_floor"] = [_run_child("floor", zip_path, args.grid, user) for _ in range(args.warm)]

        for case, results in runs.items():
            row = {"case": case, "runs": len(results), "vertices": args.grid ** 2,
                   "zip": zip_path.name, "numba_from_extension": all(
                       r["numba_file"].startswith(str(user)) for r in results),
                   "cache_in_user_folder": all(r["cache_dir"].startswith(str(user)) for r in results),
                   "cpus": os.cpu_count(),
                   "load_avg_1min_median": round(statistics.median(r["load_avg_1min"] for r in results), 2)}
            for key in ("enable_s", "solver_import_s", "first_step_s", "total_s"):
                row[key + "_median"] = round(statistics.median(r[key] for r in results), 3)
            row["total_s_min"] = round(min(r["total_s"] for r in results), 3)
            row["total_s_all"] = [round(r["total_s"], 3) for r in results]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
