"""Offline stand-in for the get-pip.py bootstrap that ansible-test downloads from its own CI
host (which these machines cannot reach). ansible-test runs it with pip's arguments, e.g.
``pip==25.2 --no-setuptools --no-wheel``: bootstrap pip from the interpreter's bundled wheel
(ensurepip), then let that pip install the requested version from the package registry."""

import ensurepip
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
ensurepip.bootstrap(upgrade=True)
if args:
    sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))
