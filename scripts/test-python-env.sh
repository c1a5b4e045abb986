#!/usr/bin/env bash
# Creates (or reuses) the virtual environment the interop tests run TensorFlow and TensorBoard in,
# with the pinned packages of tests/interop/requirements.txt, and prints its Python's path.
#
# Where: $CHORUS_TEST_VENV, else ~/.cache/chorus/test-venv (outside the checkout, so that CI's
# fresh clones reuse it). tests/CMakeLists.txt looks in the same place. The venv is rebuilt when
# requirements.txt changes (its SHA-256 is kept in the venv) or when the packages stopped importing.
# Uses Debian's /usr/bin/python3 (python3-venv), not whatever python3 is first on PATH.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
req="$here/tests/interop/requirements.txt"
venv="${CHORUS_TEST_VENV:-${HOME:-/root}/.cache/chorus/test-venv}"
base_python=/usr/bin/python3
want="$(sha256sum "$req" | cut -d' ' -f1)"
stamp="$venv/.chorus-requirements.sha256"
check='import tensorflow, tensorboard, tf_keras, numpy, xprof'
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] &&
   TF_CPP_MIN_LOG_LEVEL=3 "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  echo "test-python-env: reusing $venv" >&2
else
  [ -x "$base_python" ] || { echo "test-python-env: $base_python missing (scripts/install-deps.sh --test installs python3-venv)" >&2; exit 1; }
  echo "test-python-env: creating $venv from $req (TensorFlow is ~270 MB: a minute or two)" >&2
  start=$(date +%s)
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$base_python" -m venv "$venv"
  # PIP_CERT etc. from the environment apply (a machine behind a TLS proxy sets them).
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir -r "$req"
  TF_CPP_MIN_LOG_LEVEL=3 "$venv/bin/python" -c "$check"
  echo "$want" > "$stamp"
  echo "test-python-env: installed in $(( $(date +%s) - start )) s" >&2
fi
echo "$venv/bin/python"
