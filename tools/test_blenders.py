#!/usr/bin/env python3
"""Install Drape's linux-x64 zip into every supported Blender and run the scenario there.

    make test-blenders                                   # every line in requirements/
    python3 tools/test_blenders.py --lines 4.2,5.3       # some of them
    python3 tools/test_blenders.py --zip dist/drape-0.1.0-linux_x64.zip --jobs 1

One Blender line is one pinned file ``requirements/blender-X.Y.txt`` (its
``# python: 3.N`` line names the Python its bpy wheel needs). Each line gets
its own venv ``.venvs/bpy-X.Y`` (bpy, numpy, bpy's own dependencies; never
numba: the extension must load the wheels it bundles), rebuilt only when its
requirements file changes (a sha256 stamp, as tools/venv.sh does) with pip's
cache reused. The zip is built once with ``tools/build_extension.py`` from
``.venv`` (``make venv``); then ``tests/installed/scenario.py`` runs in each
line's Python with a scratch ``BLENDER_USER_RESOURCES`` and ``TMPDIR`` of its
own, so lines running side by side never see each other's files.

Standard library only: this runs before any venv exists. The exit status is 0
only when every selected line passed every check and exited with status 0.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import glob
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements"
VENVS = ROOT / ".venvs"
SCENARIO = ROOT / "tests" / "installed" / "scenario.py"
BUILD_PY = ROOT / ".venv" / "bin" / "python"
# The scenario's last line: "N passed, M failed".
TALLY = re.compile(r"^(\d+) passed, (\d+) failed$")
# One line installs the zip, compiles the solver cold (about a minute of CPU),
# simulates and bakes a small sheet many times: a few minutes on two cores.
LINE_TIMEOUT_S = 1200

_print_lock = threading.Lock()


class Failure(Exception):
    """An expected failure: the message is the one line the user sees."""


def say(text: str) -> None:
    with _print_lock:
        print(text, flush=True)


# ----------------------------------------------------------------------- lines


def _version_key(line: str) -> tuple[int, ...]:
    return tuple(int(p) for p in line.split("."))


def available_lines() -> dict[str, dict]:
    """``{"4.2": {"file": Path, "python": "3.11", "bpy": "4.2.23"}, ...}`` from requirements/."""
    lines = {}
    for path in sorted(REQUIREMENTS.glob("blender-*.txt")):
        line = path.stem.removeprefix("blender-")
        text = path.read_text()
        py = re.search(r"^#\s*python:\s*(\d+\.\d+)\s*$", text, re.M)
        bpy = re.search(r"^bpy==(\S+)", text, re.M)
        if not py or not bpy:
            raise Failure(f"{path.relative_to(ROOT)} needs a '# python: 3.N' line and a 'bpy==' pin")
        lines[line] = {"file": path, "python": py.group(1), "bpy": bpy.group(1)}
    return dict(sorted(lines.items(), key=lambda kv: _version_key(kv[0])))


def find_python(version: str, override: str | None = None) -> str | None:
    """A Python of exactly ``version``: the override, then PATH, then pyenv's versions."""
    if override:  # asked for by name: that one or none
        candidates = [override]
    else:
        candidates = [shutil.which(f"python{version}")] + _pyenv_pythons(version)
    for cand in candidates:
        if not cand:
            continue
        try:
            out = subprocess.run([cand, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        if out == version:
            return cand
    return None


def _pyenv_pythons(version: str) -> list[str]:
    """pyenv installs Pythons without putting python3.N on PATH (only its global one)."""
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        root = os.path.expanduser("~/.pyenv")
    return sorted(glob.glob(os.path.join(root or os.path.expanduser("~/.pyenv"), "versions", f"{version}.*",
                                         "bin", f"python{version}")), reverse=True)


# ------------------------------------------------------------------------ venvs


def venv_dir(line: str) -> pathlib.Path:
    return VENVS / f"bpy-{line}"


def _runs(py: pathlib.Path, version: str) -> bool:
    """The venv's Python still starts and is the right one (its base Python may be gone)."""
    try:
        out = subprocess.run([str(py), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    return out == version


def ensure_venv(line: str, info: dict, python: str) -> pathlib.Path:
    """``.venvs/bpy-X.Y`` with exactly the pinned requirements; rebuilt when they change."""
    venv = venv_dir(line)
    py = venv / "bin" / "python"
    req = info["file"]
    want = hashlib.sha256(req.read_bytes() + info["python"].encode()).hexdigest()
    stamp = venv / ".requirements.sha256"
    if py.exists() and stamp.is_file() and stamp.read_text().strip() == want and _runs(py, info["python"]):
        return py
    if venv.exists():
        say(f"[{line}] {venv.relative_to(ROOT)} is out of date ({req.relative_to(ROOT)} changed or its "
            "Python is gone): rebuilding")
        shutil.rmtree(venv)
    else:
        say(f"[{line}] creating {venv.relative_to(ROOT)} (bpy {info['bpy']}, Python {info['python']})")
    t0 = time.perf_counter()
    proc = subprocess.run([python, "-m", "venv", str(venv)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failure(f"Blender {line}: '{python} -m venv' failed: {proc.stderr.strip().splitlines()[-1:]} "
                      f"(on Debian: apt-get install python{info['python']}-venv)")
    log = venv / "pip.log"
    with open(log, "w") as fh:
        proc = subprocess.run([str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                               "-r", str(req)], stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        text = log.read_text()
        why = ("could not download from the package registry (no network?)"
               if re.search(r"connection|resolve|network|timed out|No matching distribution|Could not find a "
                            r"version", text, re.I) else "pip failed")
        raise Failure(f"Blender {line}: {why} installing {req.relative_to(ROOT)}; details in "
                      f"{log.relative_to(ROOT)}")
    # The extension must bring its own numba: one here would hide a broken bundle.
    leak = subprocess.run([str(py), "-c", "import importlib.util as u; "
                           "print(bool(u.find_spec('numba') or u.find_spec('llvmlite')))"],
                          capture_output=True, text=True)
    if leak.stdout.strip() != "False":
        raise Failure(f"Blender {line}: {venv.relative_to(ROOT)} has numba or llvmlite; remove them from "
                      f"{req.relative_to(ROOT)}")
    stamp.write_text(want + "\n")
    say(f"[{line}] venv ready in {time.perf_counter() - t0:.0f} s")
    return py


# ------------------------------------------------------------------------- zip


def build_zip(out_dir: pathlib.Path) -> pathlib.Path:
    if not BUILD_PY.exists():
        raise Failure("the zip is built with .venv's Blender tooling, but .venv is missing: run 'make venv' "
                      "(or make test-blenders, which does)")
    say("building the linux-x64 extension zip ...")
    t0 = time.perf_counter()
    proc = subprocess.run([str(BUILD_PY), str(ROOT / "tools" / "build_extension.py"), "--platform", "linux-x64",
                           "--output-dir", str(out_dir)], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["(no output)"]
        raise Failure(f"building the extension zip failed: {tail[0]}")
    zips = sorted(out_dir.glob("*linux_x64.zip"))
    if len(zips) != 1:
        raise Failure(f"tools/build_extension.py made {len(zips)} linux-x64 zips in {out_dir}, expected one")
    say(f"built {zips[0].name} ({zips[0].stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t0:.0f} s")
    return zips[0]


# ------------------------------------------------------------------- scenario


def run_line(line: str, info: dict, py: pathlib.Path, zip_path: pathlib.Path, keep: bool) -> dict:
    # One place per line, emptied at its next run: a failed line's files stay
    # for a look without piling up run after run (~250 MB each).
    scratch = VENVS / "scratch" / f"blender-{line}"
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    user, tmp = scratch / "user", scratch / "tmp"
    user.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV") and not k.startswith("NUMBA_")}
    env.update(BLENDER_USER_RESOURCES=str(user), TMPDIR=str(tmp), PYTHONUNBUFFERED="1",
               PYTHONDONTWRITEBYTECODE="1")
    cmd = [str(py), str(SCENARIO), "--zip", str(zip_path)]
    log_path = VENVS / "logs" / f"blender-{line}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result = {"line": line, "bpy": info["bpy"], "python": info["python"], "passed": None, "failed": None,
              "rc": None, "log": log_path}
    t0 = time.perf_counter()
    say(f"[{line}] running {SCENARIO.relative_to(ROOT)} in bpy {info['bpy']} (log: {log_path.relative_to(ROOT)})")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=scratch, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
        timer = threading.Timer(LINE_TIMEOUT_S, proc.kill)
        timer.start()
        tail = collections.deque(maxlen=25)
        in_failure = False
        try:
            # The console gets the checks and their failures; Blender's own
            # output (the forced failures' tracebacks among it) goes to the log.
            for text in proc.stdout:
                log.write(text)
                text = text.rstrip("\n")
                tail.append(text)
                m = TALLY.match(text.strip())
                if m:
                    result["passed"], result["failed"] = int(m.group(1)), int(m.group(2))
                if text.startswith(("PASS", "FAIL")):
                    in_failure = text.startswith("FAIL")
                elif not (in_failure and text.startswith("      ")) and not m:
                    in_failure = False
                    continue
                say(f"[{line}] {text}")
            # wait4: this child's own CPU time (with the children it reaped),
            # not that of a line running beside it.
            _pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        finally:
            timer.cancel()
    result["rc"] = proc.returncode
    if (proc.returncode != 0 and result["passed"] is None) or proc.returncode < 0:
        say(f"[{line}] exited with {describe_rc(proc.returncode, False)}; its last lines:\n"
            + "\n".join(f"[{line}]   {t}" for t in tail))
    result["timed_out"] = proc.returncode == -9 and time.perf_counter() - t0 >= LINE_TIMEOUT_S - 1
    result["wall_s"] = time.perf_counter() - t0
    result["cpu_s"] = usage.ru_utime + usage.ru_stime
    result["ok"] = proc.returncode == 0 and result["failed"] == 0 and bool(result["passed"])
    if keep or not result["ok"]:
        result["scratch"] = scratch
    else:
        shutil.rmtree(scratch, ignore_errors=True)  # the installed extension and its wheels: ~250 MB
    return result


def describe_rc(rc: int | None, timed_out: bool) -> str:
    if timed_out:
        return f"killed after {LINE_TIMEOUT_S} s"
    if rc is None:
        return "-"
    if rc < 0:
        import signal

        try:
            return f"{rc} ({signal.Signals(-rc).name})"
        except ValueError:
            return str(rc)
    return str(rc)


def summary(results: list[dict]) -> str:
    rows = [("Blender", "bpy", "Python", "passed", "failed", "exit", "wall s", "CPU s", "result")]
    for r in results:
        rows.append((r["line"], r["bpy"], r["python"],
                     "-" if r["passed"] is None else str(r["passed"]),
                     "-" if r["failed"] is None else str(r["failed"]),
                     describe_rc(r["rc"], r.get("timed_out", False)),
                     f"{r['wall_s']:.0f}", f"{r['cpu_s']:.0f}",
                     "ok" if r["ok"] else "FAILED"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for i, row in enumerate(rows):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


# ------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", default="", help="comma-separated Blender lines (default: all in requirements/)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="lines run side by side (default 2: the solver's cold compile is single-threaded)")
    parser.add_argument("--zip", type=pathlib.Path, default=None, help="use this zip instead of building one")
    parser.add_argument("--python3.11", dest="py311", default=None, help="the Python 3.11 to make venvs with")
    parser.add_argument("--python3.13", dest="py313", default=None, help="the Python 3.13 to make venvs with")
    parser.add_argument("--keep", action="store_true", help="keep every line's scratch folder")
    args = parser.parse_args(argv)
    t_start = time.perf_counter()
    zip_dir = None
    try:
        lines = available_lines()
        if args.lines:
            wanted = [s.strip() for s in args.lines.split(",") if s.strip()]
            unknown = [w for w in wanted if w not in lines]
            if unknown:
                raise Failure(f"no requirements/blender-{unknown[0]}.txt; known lines: {', '.join(lines)}")
            lines = {k: v for k, v in lines.items() if k in wanted}
        if not lines:
            raise Failure("no Blender line to test (requirements/blender-*.txt)")
        overrides = {"3.11": args.py311, "3.13": args.py313}
        pythons = {}
        for line, info in lines.items():
            ver = info["python"]
            if ver not in pythons:
                pythons[ver] = find_python(ver, overrides.get(ver))
            if pythons[ver] is None and overrides.get(ver):
                raise Failure(f"--python{ver}={overrides[ver]} is not a working Python {ver} "
                              f"(Blender {line} needs it)")
            if pythons[ver] is None:
                raise Failure(f"Python {ver} is needed for Blender {line} (bpy {info['bpy']} exists only for "
                              f"Python {ver}) but none was found; install it (pyenv install {ver}) or pass "
                              f"--python{ver}=/path/to/python{ver}")
        VENVS.mkdir(exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            if args.zip is not None:
                if not args.zip.is_file():
                    raise Failure(f"--zip {args.zip}: no such file")
                zip_future = None
                zip_path = args.zip.resolve()
            else:
                zip_dir = pathlib.Path(tempfile.mkdtemp(prefix="drape-zip-"))
                zip_future = pool.submit(build_zip, zip_dir)  # while pip fills the venvs
            venv_pys = {line: ensure_venv(line, info, pythons[info["python"]]) for line, info in lines.items()}
            if zip_future is not None:
                zip_path = zip_future.result()
        t_ready = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(run_line, line, info, venv_pys[line], zip_path, args.keep)
                       for line, info in lines.items()]
            results = [f.result() for f in futures]
    except Failure as exc:
        print(f"drape: {exc}", file=sys.stderr)
        return 1
    finally:
        if zip_dir is not None:
            shutil.rmtree(zip_dir, ignore_errors=True)
    t_end = time.perf_counter()
    print()
    print(summary(results))
    print(f"\nvenvs and zip: {t_ready - t_start:.0f} s; scenarios: {t_end - t_ready:.0f} s "
          f"({min(args.jobs, len(lines))} at a time); total {t_end - t_start:.0f} s")
    for r in results:
        if not r["ok"]:
            print(f"Blender {r['line']}: see {r['log'].relative_to(ROOT)}"
                  + (f"; its files are in {r['scratch'].relative_to(ROOT)}" if r.get("scratch") else ""))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
