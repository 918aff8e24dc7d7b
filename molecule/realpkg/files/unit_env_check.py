"""Check the installed SGLang from inside a unit's own environment, without starting the unit.

As root: ``python3 unit_env_check.py sglang-qwen.service`` reads the unit's User, Group,
WorkingDirectory, Environment= and EnvironmentFile= from systemd and its ExecStart from the unit
file, then runs itself through ``systemd-run`` with exactly those, under the python of the
unit's ExecStart. There it imports sglang, sglang.srt.server_args and flashinfer, parses the
ExecStart's SGLang arguments with the installed release's own ``prepare_server_args``, and asks
FlashInfer's JIT where its CUDA toolkit is (``flashinfer.jit.cpp_ext.get_cuda_path``), runs that
nvcc and compares it with FlashInfer's own ``get_cuda_version`` and torch's CUDA. One JSON object
on stdout.
"""

import json
import os
import shlex
import subprocess
import sys


def unit_props(unit):
    props = ("User", "Group", "WorkingDirectory", "Environment", "EnvironmentFiles", "FragmentPath")
    out = subprocess.run(["systemctl", "show", unit, "-p", ",".join(props)], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    found = {}
    for line in out.splitlines():
        key, value = line.split("=", 1) if "=" in line else (line, "")
        found[key] = value
    return found


def exec_start(fragment):
    """ExecStart words as systemd passes them ($$ and %% unescaped)."""
    with open(fragment) as fh:
        lines = [line for line in fh.read().splitlines() if line.startswith("ExecStart=")]
    if len(lines) != 1:
        sys.exit("expected one ExecStart= in %s, found %d" % (fragment, len(lines)))
    return [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(lines[0][len("ExecStart="):])]


def outer(unit):
    props = unit_props(unit)
    argv = exec_start(props["FragmentPath"])
    cmd = ["systemd-run", "--wait", "--pipe", "--quiet", "--collect",
           "-p", "User=" + props["User"], "-p", "Group=" + props["Group"],
           "-p", "WorkingDirectory=" + props["WorkingDirectory"]]
    for word in shlex.split(props.get("Environment", "")):
        cmd += ["--setenv", word]
    for entry in props.get("EnvironmentFiles", "").split("\n"):
        if entry.strip():
            path, flags = (entry.strip().split(" ", 1) + [""])[:2]
            cmd += ["-p", "EnvironmentFile=%s%s" % ("-" if "ignore_errors=yes" in flags else "", path)]
    script = "/var/tmp/unit_env_check.py"
    with open(__file__) as src, open(script, "w") as dst:
        dst.write(src.read())
    os.chmod(script, 0o644)
    res = subprocess.run(cmd + ["--", argv[0], script, "--inner", json.dumps(argv)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    if res.returncode != 0:
        sys.stderr.write(res.stderr[-4000:])
        sys.exit("the check in the unit's environment failed (exit %d)" % res.returncode)
    sys.stdout.write(res.stdout)


def inner(argv):
    report = {"uid": os.getuid(), "home": os.environ.get("HOME"), "python": sys.executable,
              "CUDA_HOME": os.environ.get("CUDA_HOME"), "PATH": os.environ.get("PATH")}
    import sglang
    from sglang.srt import server_args
    import flashinfer
    import torch
    report.update(sglang=sglang.__version__, flashinfer=flashinfer.__version__, torch=torch.__version__,
                  torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
    # The unit runs `python [launcher] -m sglang.launch_server ARGS`: the release's own
    # prepare_server_args is what launch_server calls on ARGS.
    index = argv.index("-m")
    report["launcher"] = argv[index + 1]
    args = server_args.prepare_server_args(argv[index + 2:])
    report["server_args"] = {k: getattr(args, k, None) for k in (
        "model_path", "tp_size", "host", "port", "served_model_name", "speculative_algorithm",
        "speculative_num_steps", "speculative_eagle_topk", "kv_cache_dtype")}
    from flashinfer.jit import cpp_ext
    cuda_home = cpp_ext.get_cuda_path()
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    out = subprocess.run([nvcc, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, check=False)
    report.update(flashinfer_cuda_home=cuda_home, nvcc=nvcc, nvcc_rc=out.returncode,
                  nvcc_version=out.stdout.strip().splitlines()[-2:] if out.stdout.strip() else [],
                  flashinfer_cuda_version=str(cpp_ext.get_cuda_version()))
    try:
        import flashinfer_jit_cache  # noqa: F401  (the precompiled kernels, when installed)
        report["flashinfer_jit_cache"] = True
    except ImportError:
        report["flashinfer_jit_cache"] = False
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--inner":
        inner(json.loads(sys.argv[2]))
    elif len(sys.argv) == 2:
        outer(sys.argv[1])
    else:
        sys.exit(__doc__)
