#!/usr/bin/env bash
# Create or refresh .venv with the pinned requirements (Blender 5.0 as the bpy
# module, numba, pytest). Every failure ends in one line that says why.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
die() { echo "drape: $*" >&2; exit 1; }

command -v "$PY" >/dev/null 2>&1 \
  || die "Python 3.11 is needed (the bpy module and Blender 4.2-5.0 use 3.11) but '$PY' was not found; install it or run 'make PYTHON=/path/to/python3.11 ...'."
ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) \
  || die "'$PY' does not run."
[ "$ver" = "3.11" ] \
  || die "Python 3.11 is needed (bpy==5.0.1 exists only for 3.11) but '$PY' is Python $ver; run 'make PYTHON=/path/to/python3.11 ...'."

want=$(cat requirements-dev.txt | sha256sum | cut -d' ' -f1)
stamp=.venv/.requirements.sha256
site=.venv/lib/python3.11/site-packages

if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  [ -x .venv/bin/python ] || "$PY" -m venv .venv || die "could not create .venv with '$PY -m venv' (on Debian: apt-get install python3.11-venv)."
  echo "drape: installing pinned requirements into .venv (about 30 s the first time) ..."
  if ! .venv/bin/python -m pip install --disable-pip-version-check -q -r requirements-dev.txt >.venv/pip.log 2>&1; then
    if grep -qiE 'connection|resolve|network|timed out|No matching distribution|Could not find a version' .venv/pip.log; then
      die "could not download the pinned requirements from the package registry (no network?); details in .venv/pip.log."
    fi
    die "pip could not install requirements-dev.txt; details in .venv/pip.log."
  fi
  echo "$want" >"$stamp"
fi

# The repository root is the add-on package: expose it to the venv as 'drape'
# so tests, benchmarks and tools import it by its real name.
ln -sfn "$PWD" "$site/drape"
