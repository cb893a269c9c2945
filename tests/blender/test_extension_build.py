"""tools/build_extension.py on bad input and on a dirty tree.

Each test runs the build script from a scratch copy of the repository, so the
shared working tree is never touched. Wrong pins and a missing network must
stop the build with one line that says why (no traceback); uncommitted files
must end up in the zip, because users test what the author has on disk.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SKIP_TOP = {".git", ".venv", "dist", "wheels", "out", ".pytest_cache"}


def _copy_repo(dst, full=False):
    """The build script, its inputs and (full=True) the whole working tree, dirty as it is."""
    if full:
        shutil.copytree(ROOT, dst, symlinks=True,
                        ignore=lambda d, names: [n for n in names if pathlib.Path(d) == ROOT and n in SKIP_TOP])
    else:
        (dst / "tools").mkdir(parents=True)
        for rel in ("tools/build_extension.py", "requirements-dev.txt", "blender_manifest.toml", "__init__.py"):
            shutil.copy2(ROOT / rel, dst / rel)
    return dst


def _build(repo, *args, env=None):
    return subprocess.run([sys.executable, str(repo / "tools" / "build_extension.py"), *args],
                          capture_output=True, text=True, env=env, timeout=900)


def _one_line_reason(proc):
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("drape: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_manifest_that_disagrees_with_the_pins_is_refused(tmp_path):
    repo = _copy_repo(tmp_path / "repo")
    manifest = repo / "blender_manifest.toml"
    text = manifest.read_text()
    assert "numba-0.68.1-cp311" in text
    manifest.write_text(text.replace("numba-0.68.1-cp311", "numba-0.68.0-cp311"))
    reason = _one_line_reason(_build(repo, "--platform", "linux-x64", "--output-dir", str(tmp_path / "dist")))
    assert "blender_manifest.toml" in reason and "linux-x64" in reason and "--update-manifest" in reason
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").glob("*.zip"))
    assert not (repo / "wheels").exists() or not list((repo / "wheels").glob("*.whl"))  # nothing downloaded


def test_no_network_stops_with_one_line(tmp_path):
    repo = _copy_repo(tmp_path / "repo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    # No pip configuration, an index nobody listens on: what a machine without network sees.
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0",
               PIP_TIMEOUT="3")
    reason = _one_line_reason(_build(repo, "--platform", "windows-x64", "--output-dir", str(tmp_path / "dist"),
                                     env=env))
    assert "no network" in reason and "windows-x64" in reason
    assert not list((repo / "wheels").glob("*.whl"))


def test_unknown_platform_is_refused(tmp_path):
    repo = _copy_repo(tmp_path / "repo")
    manifest = repo / "blender_manifest.toml"
    manifest.write_text(re.sub(r'(?m)^platforms = \[.*\]', 'platforms = ["linux-x64"]', manifest.read_text()))
    reason = _one_line_reason(_build(repo, "--platform", "windows-x64", "--output-dir", str(tmp_path / "dist")))
    assert "platforms" in reason and "windows-x64" in reason


@pytest.mark.slow
def test_dirty_tree_builds_with_its_uncommitted_files(tmp_path):
    repo = _copy_repo(tmp_path / "repo", full=True)  # not even a git checkout
    # Share the repository's wheel cache (downloads land there too).
    (ROOT / "wheels").mkdir(exist_ok=True)
    os.symlink(ROOT / "wheels", repo / "wheels")
    (repo / "solver" / "uncommitted_probe.py").write_text("ANSWER = 42\n")
    (repo / "tests" / "uncommitted_test.py").write_text("")  # excluded folder stays excluded
    proc = _build(repo, "--platform", "linux-x64", "--output-dir", str(tmp_path / "dist"))
    assert proc.returncode == 0, proc.stderr
    zips = list((tmp_path / "dist").glob("*.zip"))
    manifest = tomllib.loads((ROOT / "blender_manifest.toml").read_text())
    assert [z.name for z in zips] == [f"{manifest['id']}-{manifest['version']}-linux_x64.zip"]
    with zipfile.ZipFile(zips[0]) as zf:
        names = zf.namelist()
        assert zf.read("solver/uncommitted_probe.py") == b"ANSWER = 42\n"
    assert "tests/uncommitted_test.py" not in names
