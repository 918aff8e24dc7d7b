#!/usr/bin/env bash
# ansible-test sanity on this checkout. ansible-test insists on running from
# .../ansible_collections/<namespace>/<name>, so the git-tracked (and untracked, not ignored)
# files are mirrored to such a path first, outside the checkout (inside it, git would report
# the mirror as ignored and ansible-test would skip every target).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$root/.venv}
py=$venv/bin/python
dest=${SANITY_DIR:-${TMPDIR:-/tmp}/blackwell-sglang-sanity}/ansible_collections/blackwell/sglang

# ansible-test would download get-pip.py from a host outside the package registries.
pip_ver=$("$py" - <<'PY'
from ansible_test._internal.python_requirements import get_venv_packages
class P: version = "x"
print(get_venv_packages(P())["pip"])
PY
)
cache=$HOME/.ansible/test/cache
mkdir -p "$cache"
cp "$root/tools/ansible_test_get_pip.py" "$cache/get_pip_${pip_ver//./_}.py"

rm -rf "$dest"; mkdir -p "$dest"
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$dest"
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
cd "$dest"
# --venv: each sanity test gets its own venv with its pinned tools, installed from PyPI.
exec "$venv/bin/ansible-test" sanity --venv --python "$pyver" --color no "$@"
