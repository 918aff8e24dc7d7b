"""Regenerate sglang_sim/sglang_<version>_flags.json: every option string the real
SGLang release accepts, with its arity, from the release's own parser
(tests/contract/sglang_release.py rebuilds it from the wheel).

    .venv/bin/python sim/scripts/gen_sglang_flags.py 0.5.23

The simulator accepts (and ignores, with a warning) the flags it does not model, so a
unit written for a real node runs on the sim, and abbreviations are exactly as
ambiguous as on the real parser.
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "contract"))

import sglang_release  # noqa: E402


def main(version):
    parser = sglang_release.real_parser(version)
    out = []
    for action in parser._actions:
        if not action.option_strings or "-h" in action.option_strings:
            continue
        nargs = action.nargs
        out.append({"names": list(action.option_strings), "dest": action.dest,
                    "nargs": nargs if nargs is not None else None})
    path = ROOT / "sim" / "sglang_sim" / ("sglang_%s_flags.json" % version.replace(".", "_"))
    lines = ",\n".join(json.dumps(a, sort_keys=True) for a in out)
    path.write_text('{"version": %s, "prog": %s, "arguments": [\n%s\n]}\n'
                    % (json.dumps(version), json.dumps(parser.prog), lines))
    print("%s: %d arguments" % (path, len(out)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else sglang_release.PINNED)
