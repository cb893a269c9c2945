"""Benchmark results as data (benchmarks/results.py, tools/plot_bench.py):
the recorder tags a real benchmark's JSON lines with the commit and the CPU,
the history table lists them newest first, and a malformed line is an error.
No solver and no Blender: the benchmark here is a small script of its own."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import plot_bench  # noqa: E402
import results  # noqa: E402


def _fake_bench(tmp_path, rows, exit_code=0):
    script = tmp_path / "bench_fake.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        print("warming up")
        for row in {rows!r}:
            print(json.dumps(row), flush=True)
        sys.exit({exit_code})
    """))
    return str(script)


def _git_head_short():
    return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


def test_recorder_appends_each_json_line_with_commit_cpu_and_time(tmp_path, capsys):
    path = str(tmp_path / "results.jsonl")
    rows = [{"scene": "a", "vertices": 10, "ms_per_step_median": 1.5},
            {"scene": "b", "vertices": 20, "ms_per_step_median": 2.5}]
    assert results.run(_fake_bench(tmp_path, rows), path=path) == 0
    assert "warming up" in capsys.readouterr().out  # the benchmark's own output is passed through
    lines = open(path).read().splitlines()
    assert len(lines) == 2  # the plain text line is not a record
    recs = [json.loads(x) for x in lines]
    assert [r["scene"] for r in recs] == ["a", "b"]
    assert all(r["bench"] == "fake" for r in recs)
    assert all(r["commit"].split("-")[0] == _git_head_short() for r in recs)
    assert all(r["commit"] in (_git_head_short(), _git_head_short() + "-dirty") for r in recs)
    if os.path.exists("/proc/cpuinfo"):
        names = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")]
        if names:
            assert all(r["cpu"] == names[0] for r in recs)
    assert all(r["cpu"] for r in recs)
    assert all(r["timestamp"].endswith("Z") and len(r["timestamp"]) == 20 for r in recs)

    # A second run appends; it does not replace.
    assert results.run(_fake_bench(tmp_path, rows[:1]), path=path) == 0
    assert len(open(path).read().splitlines()) == 3


def test_recorder_keeps_what_a_failing_benchmark_measured_and_its_status(tmp_path):
    path = str(tmp_path / "results.jsonl")
    assert results.run(_fake_bench(tmp_path, [{"scene": "a", "ms_per_step_median": 1.0}], exit_code=3),
                       path=path) == 3
    assert len(open(path).read().splitlines()) == 1


def test_history_table_lists_every_run_newest_first_with_commit_and_cpu(tmp_path):
    path = tmp_path / "results.jsonl"
    recs = [
        {"bench": "solver", "commit": "aaaaaaa", "cpu": "CPU One", "timestamp": "2030-01-01T00:00:00Z",
         "scene": "sheet", "vertices": 100, "ms_per_step_median": 0.75},
        {"bench": "solver", "commit": "bbbbbbb-dirty", "cpu": "CPU Two", "timestamp": "2030-02-01T00:00:00Z",
         "scene": "sheet", "vertices": 100, "ms_per_step_median": 0.5},
        {"bench": "bake", "commit": "aaaaaaa", "cpu": "CPU One", "timestamp": "2030-01-01T00:00:00Z",
         "scene": "pc2", "vertices": 10, "ms_per_frame_overhead": 0.25},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    md = tmp_path / "benchmarks.md"
    png = tmp_path / "benchmarks.png"
    plot_bench.history(str(path), str(md), str(png))
    text = md.read_text()
    solver = text[text.index("## solver"):]
    rows = [ln for ln in solver.splitlines() if ln.startswith("| 20")]
    assert len(rows) == 2
    assert "bbbbbbb-dirty" in rows[0] and "CPU Two" in rows[0] and "0.5" in rows[0]
    assert "aaaaaaa" in rows[1] and "CPU One" in rows[1] and "0.75" in rows[1]
    bake = text[text.index("## bake"):text.index("## solver")]
    assert "pc2" in bake and "0.25" in bake and "CPU One" in bake
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]", '{"scene": "no bench tag"}'])
def test_a_malformed_line_is_reported_with_its_line_number_and_nothing_is_written(tmp_path, bad):
    path = tmp_path / "results.jsonl"
    good = json.dumps({"bench": "solver", "commit": "c", "cpu": "x", "timestamp": "t", "scene": "s"})
    path.write_text(good + "\n" + bad + "\n" + good + "\n")
    md = tmp_path / "benchmarks.md"
    with pytest.raises(ValueError, match=r"results\.jsonl:2:"):
        plot_bench.history(str(path), str(md), None)
    assert not md.exists()
    # The command line says so and fails, too.
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "plot_bench.py"), "history", str(path),
                           str(md), str(tmp_path / "b.png")], capture_output=True, text=True)
    assert proc.returncode == 1 and "results.jsonl:2:" in proc.stderr and "nothing written" in proc.stderr
    assert not md.exists()
