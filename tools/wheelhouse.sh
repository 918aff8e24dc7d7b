#!/usr/bin/env bash
# The air-gapped wheelhouse for one install recipe: every wheel `pip install` needs on the node,
# downloaded on a machine that reaches the package registry, for the node's platform (Linux
# x86_64, CPython 3.11 by default, glibc >= 2.34: the oldest the recipe's sglang wheel runs on).
# Copy or mount the printed directory onto the node and set
#   sglang_install_find_links: <that directory on the node>
# (the install role then runs pip with --no-index --find-links, the registry is never asked).
#
#   tools/wheelhouse.sh [--link PATH] [RELEASE]     prints the wheelhouse directory
#
# RELEASE is a key of sglang_install_recipes in roles/install/defaults/main.yml (default 0.5.23);
# the packages are the recipe's own list, so the wheelhouse cannot drift from what the role
# installs. The directory is ${WHEELHOUSE_ROOT:-${XDG_CACHE_HOME:-~/.cache}/blackwell-sglang/wheelhouse}/
# <release>-<hash of packages, python, platform tags, extra packages>: a later run with the same
# recipe finds it complete and downloads nothing. --link PATH also points the symlink PATH at it.
# Environment: WHEELHOUSE_PYTHON_VERSION (3.11), WHEELHOUSE_GLIBC (2.34, the oldest glibc of the
# nodes), WHEELHOUSE_EXTRA (more requirements, space separated, e.g. flashinfer-jit-cache==0.7.2
# from an index set in pip's own configuration), PYTHON (the python whose pip downloads: it must
# be the node's Python version, because pip evaluates the dependencies' environment markers, e.g.
# mistral-common's `numpy<2.4; python_version <= "3.12"`, with the interpreter that runs it, not
# with --python-version).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
link=""
if [[ ${1:-} == --link ]]; then link=$2; shift 2; fi
release=${1:-0.5.23}
pyver=${WHEELHOUSE_PYTHON_VERSION:-3.11}
glibc=${WHEELHOUSE_GLIBC:-2.34}
extra=${WHEELHOUSE_EXTRA:-}
cache=${WHEELHOUSE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/blackwell-sglang/wheelhouse}

# The downloader: a python of the node's version with pip.
python=${PYTHON:-}
if [[ -z $python ]]; then
  for c in "python$pyver" "$HOME"/.pyenv/versions/"$pyver"*/bin/python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -m pip --version >/dev/null 2>&1; then python=$c; break; fi
  done
fi
if [[ -z $python ]] || [[ $("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) != "$pyver" ]]; then
  echo "wheelhouse: need Python $pyver with pip to download for a Python $pyver node (pip evaluates" \
       "environment markers with its own interpreter): install it or set PYTHON=/path/to/python$pyver" >&2
  exit 2
fi

# The recipe's packages, from the role's defaults (one per line); PyYAML from the project's venv.
yaml_python=${YAML_PYTHON:-python3}
[[ -z ${YAML_PYTHON:-} && -x $root/.venv/bin/python ]] && yaml_python=$root/.venv/bin/python
packages=$("$yaml_python" - "$root/roles/install/defaults/main.yml" "$release" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
try:
    import yaml
    recipes = yaml.safe_load(text)["sglang_install_recipes"]
    recipe = recipes.get(sys.argv[2])
    if recipe is None:
        sys.exit("no recipe %r in sglang_install_recipes (known: %s)" % (sys.argv[2], ", ".join(recipes)))
    print("\n".join(recipe["packages"]))
except ImportError:
    sys.exit("PyYAML is needed to read the recipe: run from the project's venv (make venv)")
PY
)

# pip does not expand --platform to the older manylinux tags a glibc also runs: list them all.
minor=${glibc#*.}
platforms=()
for ((x = minor; x >= 5; x--)); do platforms+=(--platform "manylinux_2_${x}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64)

key=$(printf '%s\n' "$packages" "$extra" "$pyver" "${platforms[*]}" markers-by-target-python | sha256sum | cut -c1-12)
dir=$cache/$release-$key
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [[ ! -f $dir/.complete ]]; then
  mkdir -p "$dir"
  t0=$(date +%s)
  set +e
  # shellcheck disable=SC2086  # WHEELHOUSE_EXTRA is a word list on purpose
  "$python" -m pip download --disable-pip-version-check --progress-bar off -q -d "$dir" \
    --only-binary=:all: --python-version "$pyver" --implementation cp "${platforms[@]}" \
    $packages $extra 2>&1 | grep -v 'is ignored: it is neither a file nor a directory' >&2
  rc=${PIPESTATUS[0]}
  set -e
  [[ $rc == 0 ]] || { echo "wheelhouse: pip download failed (exit $rc)" >&2; exit 1; }
  dt=$(( $(date +%s) - t0 ))
  { echo "release: $release"; echo "packages: $(echo $packages $extra)"; echo "python: $pyver"; echo "glibc: $glibc"
    echo "wheels: $(find "$dir" -maxdepth 1 -name '*.whl' | wc -l)"; echo "bytes: $(du -sb "$dir" | cut -f1)"
    echo "download_seconds: $dt"; } >"$dir/.complete.tmp"
  mv "$dir/.complete.tmp" "$dir/.complete"
  echo "wheelhouse: downloaded $release in ${dt}s into $dir" >&2
else
  echo "wheelhouse: $dir is complete, nothing to download" >&2
fi
if [[ -n $link ]]; then
  mkdir -p "$(dirname "$link")"
  ln -sfn "$dir" "$link"
fi
echo "$dir"
