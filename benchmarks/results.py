"""Benchmark results as data: run a benchmark, pass its output through, and
append each JSON line it prints to ``benchmarks/results/results.jsonl``
tagged with the commit, the CPU and the time, so figures can be compared
over commits and machines instead of being copied into prose.

    .venv/bin/python benchmarks/results.py benchmarks/bench_solver.py [args...]

``make bench`` and ``make bench-<group>`` run every benchmark this way.
``tools/plot_bench.py`` draws ``docs/benchmarks.md`` and
``docs/benchmarks.png`` from the file.
"""

import datetime
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "results.jsonl")
# Written by the recorder or drawn from its output: changing them does not
# change what a benchmark measures, so they do not make a commit "dirty".
_NOT_CODE = (":(exclude)benchmarks/results", ":(exclude)docs")


def commit(root=ROOT):
    """The short commit of the checkout, "-dirty" when tracked files differ
    from it; "unknown" outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--",
                                  ".", *_NOT_CODE], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if changed else "")


def cpu_name():
    """The CPU's model name as the OS reports it."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                  text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            pass
    return platform.processor() or platform.machine() or "unknown"


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def tagged(line, bench, tags):
    """The record of one output line, or None when the line is not a JSON
    object (benchmarks also print plain progress text)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    return {"bench": bench, **tags, "timestamp": utc_now(), **record}


def append(records, path=RESULTS):
    """Append records as JSON lines (the folder is created if needed)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")


def load(path=RESULTS):
    """Every record of a results file. A line that is not a JSON object
    raises ValueError naming the file and the line: a table drawn from what
    is left would hide that history was lost."""
    records = []
    with open(path) as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc}): {line.strip()[:80]!r}") from None
            if not isinstance(record, dict) or "bench" not in record:
                raise ValueError(f"{path}:{number}: not a benchmark record (a JSON object with 'bench'): "
                                 f"{line.strip()[:80]!r}")
            records.append(record)
    return records


def bench_name(script):
    name = os.path.splitext(os.path.basename(script))[0]
    return name[len("bench_"):] if name.startswith("bench_") else name


def run(script, args=(), path=RESULTS, python=sys.executable):
    """Run one benchmark script, echo its output, append its JSON lines;
    returns its exit status."""
    tags = {"commit": commit(), "cpu": cpu_name()}
    bench = bench_name(script)
    proc = subprocess.Popen([python, script, *args], stdout=subprocess.PIPE, text=True, bufsize=1)
    recorded = 0
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        record = tagged(line, bench, tags)
        if record is not None:
            # One line at a time: what a benchmark measured before it failed stays recorded.
            append([record], path)
            recorded += 1
    code = proc.wait()
    print(f"results: {recorded} line(s) of {bench} appended to {os.path.relpath(path, ROOT)} "
          f"({tags['commit']}, {tags['cpu']})", file=sys.stderr, flush=True)
    return code


def main(argv):
    if len(argv) < 2:
        print("usage: results.py benchmarks/bench_<group>.py [args...]", file=sys.stderr)
        return 2
    return run(argv[1], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
