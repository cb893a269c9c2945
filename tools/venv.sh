#!/usr/bin/env bash
# Create or refresh .venv with the pinned requirements (the newest Blender as the
# bpy module, numba, pytest). Every failure ends in one line that says why.
set -u
cd "$(dirname "$0")/.."
die() { echo "drape: $*" >&2; exit 1; }

# Python 3.13: bpy 5.1+ wheels exist only for it. pyenv installs it without
# putting python3.13 on PATH, so look there too.
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.13 "$(pyenv root 2>/dev/null)/versions/3.13.0/bin/python3.13" \
              "$(ls -d "$(pyenv root 2>/dev/null)"/versions/3.13.*/bin/python3.13 2>/dev/null | tail -n 1)"; do
    [ -n "$cand" ] && "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 13)' >/dev/null 2>&1 && { PY=$cand; break; }
  done
fi
[ -n "$PY" ] || die "Python 3.13 is needed (the bpy 5.3 module exists only for 3.13) but none was found; install it (pyenv install 3.13) or run 'make PYTHON=/path/to/python3.13 ...'."
ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) \
  || die "'$PY' does not run."
[ "$ver" = "3.13" ] \
  || die "Python 3.13 is needed (bpy==5.3.0 exists only for 3.13) but '$PY' is Python $ver; run 'make PYTHON=/path/to/python3.13 ...'."

want=$( (cat requirements-dev.txt; echo "$ver") | sha256sum | cut -d' ' -f1)
stamp=.venv/.requirements.sha256
site=.venv/lib/python$ver/site-packages

if [ -x .venv/bin/python ] && ! .venv/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 13)' >/dev/null 2>&1; then
  echo "drape: .venv was made with another Python; rebuilding it with $PY ..."
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  [ -x .venv/bin/python ] || "$PY" -m venv .venv || die "could not create .venv with '$PY -m venv' (on Debian: apt-get install python3.13-venv)."
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
