#!/usr/bin/env bash
# Create (or refresh) the project venv from requirements-dev.txt. Reuses it when the
# pinned requirements have not changed (hash stamp), so a second run takes a second.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$root/.venv}
req=$root/requirements-dev.txt
stamp=$venv/.requirements.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)

if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $venv/bin/python ]]; then
  echo "venv: $venv up to date"
  exit 0
fi

find_python() {
  local c
  for c in "${PYTHON:-}" python3.13 python3.12 \
           "$HOME"/.pyenv/versions/3.13*/bin/python3 "$HOME"/.pyenv/versions/3.12*/bin/python3; do
    [[ -n $c ]] || continue
    command -v "$c" >/dev/null 2>&1 || [[ -x $c ]] || continue
    if "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
      echo "$c"; return 0
    fi
  done
  return 1
}
py=$(find_python) || {
  echo "venv: need Python >= 3.12 for ansible-core 2.21 (set PYTHON=/path/to/python3.12)" >&2
  exit 1
}
echo "venv: creating $venv with $($py --version)"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r "$req"
echo "$want" > "$stamp"
# Read whole before cutting: head closing the pipe early makes ansible print a traceback.
version=$("$venv/bin/ansible" --version 2>/dev/null) || true
echo "venv: ready (${version%%$'\n'*})"
