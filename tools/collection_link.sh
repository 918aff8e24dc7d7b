#!/usr/bin/env bash
# Make this checkout visible to Ansible as blackwell.sglang without installing it:
# .cache/collections/ansible_collections/blackwell/sglang -> the checkout. Prints the path
# to put in ANSIBLE_COLLECTIONS_PATH.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=$root/.cache/collections
link=$base/ansible_collections/blackwell/sglang
mkdir -p "$(dirname "$link")"
if [[ ! -L $link ]]; then
  [[ -e $link ]] && { echo "collection_link: $link exists and is not a symlink" >&2; exit 1; }
  ln -s "$root" "$link"
fi
echo "$base"
