"""The set-up script stops with one line that says why, not a traceback."""

import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _venv(python, tmp_path):
    env = dict(os.environ, PYTHON=str(python))
    return subprocess.run(["bash", str(ROOT / "tools" / "venv.sh")], env=env, capture_output=True,
                          text=True, timeout=60)


def test_missing_python_is_one_line(tmp_path):
    proc = _venv(tmp_path / "no-such-python", tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no-such-python" in lines[0] and "does not run" in lines[0]


def test_wrong_python_version_is_one_line(tmp_path):
    fake = tmp_path / "python3.12"
    fake.write_text("#!/bin/sh\necho 3.12\n")
    fake.chmod(0o755)
    proc = _venv(fake, tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "is Python 3.12" in lines[0]
    assert "Traceback" not in proc.stderr


def test_no_registry_is_one_line(tmp_path):
    # A copy of the set-up in an empty folder, with the package index pointed at a closed port.
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "venv.sh").write_text((ROOT / "tools" / "venv.sh").read_text())
    (tmp_path / "requirements-dev.txt").write_text((ROOT / "requirements-dev.txt").read_text())
    env = dict(os.environ, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_EXTRA_INDEX_URL="",
               PIP_FIND_LINKS="", PIP_RETRIES="0", PIP_TIMEOUT="2", PIP_NO_CACHE_DIR="1")
    env.pop("PYTHON", None)
    proc = subprocess.run(["bash", str(tmp_path / "tools" / "venv.sh")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not download" in lines[0], proc.stderr
