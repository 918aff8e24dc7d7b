"""A stand-in ``nvidia-smi`` for the simulated GPUs.

Supports ``--query-gpu=...``, ``--query-compute-apps=...``, ``--format=csv[,noheader][,nounits]``,
``-i/--id``, ``-L`` and the plain table (with its Processes block), printing the formats
of a real R580 driver (see tests/fixtures/nvidia-h200/). GPUs come from the simulator
profile (SGLANG_SIM_* env or /etc/sglang-sim/config.json); memory in use is the sum
over live rank processes in <state_dir>/procs/*.json, so a SIGKILLed process frees its
memory like on a real driver.
"""

import sys
import time

from sglang_sim import _proc, config

EXIT_INVALID_ARGS = 2
EXIT_NOT_FOUND = 6

INVALID_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"


def _gpu_fields():
    def mem(key):
        return lambda g: (g[key], "MiB")

    return {
        "index": ("index", lambda g: (g["index"], None)),
        "uuid": ("uuid", lambda g: (g["uuid"], None)),
        "gpu_uuid": ("uuid", lambda g: (g["uuid"], None)),
        "name": ("name", lambda g: (g["name"], None)),
        "gpu_name": ("name", lambda g: (g["name"], None)),
        "count": ("count", lambda g: (g["count"], None)),
        "memory.total": ("memory.total [MiB]", mem("memory_mib")),
        "memory.used": ("memory.used [MiB]", mem("used_mib")),
        "memory.free": ("memory.free [MiB]", mem("free_mib")),
        "memory.reserved": ("memory.reserved [MiB]", mem("reserved_mib")),
        "compute_cap": ("compute_cap", lambda g: (g["compute_cap"], None)),
        "driver_version": ("driver_version", lambda g: (g["driver_version"], None)),
        "utilization.gpu": ("utilization.gpu [%]", lambda g: (g["util"], "%")),
        "utilization.memory": ("utilization.memory [%]", lambda g: (g["mem_util"], "%")),
        "pci.bus_id": ("pci.bus_id", lambda g: (g["pci_bus_id"], None)),
        "gpu_bus_id": ("pci.bus_id", lambda g: (g["pci_bus_id"], None)),
        "temperature.gpu": ("temperature.gpu", lambda g: (g["temp"], None)),
        "power.draw": ("power.draw [W]", lambda g: ("%.2f" % g["power"], "W")),
        "power.limit": ("power.limit [W]", lambda g: ("%.2f" % g["power_cap_w"], "W")),
        "persistence_mode": ("persistence_mode", lambda g: ("Enabled", None)),
        "pstate": ("pstate", lambda g: ("P0", None)),
        "serial": ("serial", lambda g: (g["serial"], None)),
        "vbios_version": ("vbios_version", lambda g: ("98.02.2E.00.05", None)),
        "compute_mode": ("compute_mode", lambda g: ("Default", None)),
        "mig.mode.current": ("mig.mode.current", lambda g: ("[N/A]", None)),
        "timestamp": ("timestamp", lambda g: (time.strftime("%Y/%m/%d %H:%M:%S.000"), None)),
    }


APP_FIELDS = {
    "pid": ("pid", lambda a: (a["pid"], None)),
    "process_name": ("process_name", lambda a: (a["process_name"], None)),
    "name": ("process_name", lambda a: (a["process_name"], None)),
    "used_memory": ("used_gpu_memory [MiB]", lambda a: (a["used_mib"], "MiB")),
    "used_gpu_memory": ("used_gpu_memory [MiB]", lambda a: (a["used_mib"], "MiB")),
    "gpu_uuid": ("gpu_uuid", lambda a: (a["gpu_uuid"], None)),
    "gpu_bus_id": ("gpu_bus_id", lambda a: (a["gpu_bus_id"], None)),
    "gpu_name": ("gpu_name", lambda a: (a["gpu_name"], None)),
    "gpu_serial": ("gpu_serial", lambda a: (a["gpu_serial"], None)),
}


def snapshot(settings=None):
    """GPUs with live usage, and the compute apps on them."""
    settings = settings or config.load_settings()
    gpus = config.gpus(settings)
    by_index = {g["index"]: g for g in gpus}
    apps = []
    for g in gpus:
        g["used_mib"] = 0
        g["count"] = len(gpus)
        g["serial"] = "16540240%05d" % (g["index"] + 74581)
    for rec in _proc.read_live_procs(settings["state_dir"]):
        g = by_index.get(rec.get("gpu_index"))
        if g is None:
            continue
        used = int(rec.get("used_mib", 0))
        g["used_mib"] += used
        apps.append({"pid": int(rec["pid"]), "process_name": rec.get("process_name") or "python3",
                     "used_mib": used, "gpu_uuid": g["uuid"], "gpu_bus_id": g["pci_bus_id"],
                     "gpu_name": g["name"], "gpu_serial": g["serial"], "gpu_index": g["index"]})
    for g in gpus:
        g["used_mib"] = min(g["used_mib"], g["memory_mib"] - g["reserved_mib"])
        g["free_mib"] = g["memory_mib"] - g["reserved_mib"] - g["used_mib"]
        busy = g["used_mib"] > 0
        g["util"] = 0
        g["mem_util"] = 0
        g["temp"] = 42 + (10 if busy else 0) + g["index"] % 3
        g["power"] = g["idle_power_w"] + (g["power_cap_w"] * 0.15 if busy else 0) + 0.47
    apps.sort(key=lambda a: (a["gpu_index"], a["pid"]))
    return gpus, apps


def _select(gpus, ids):
    if ids is None:
        return gpus
    out = []
    for part in ids.split(","):
        part = part.strip()
        match = [g for g in gpus if part == str(g["index"]) or part == g["uuid"]
                 or part.lower() == g["pci_bus_id"].lower()]
        if not match:
            return None
        for g in match:
            if g not in out:
                out.append(g)
    return out


def _csv(rows, specs, fmt):
    noheader = "noheader" in fmt
    nounits = "nounits" in fmt
    lines = []
    if not noheader:
        lines.append(", ".join(spec[0] for spec in specs))
    for row in rows:
        cells = []
        for _header, fn in specs:
            value, unit = fn(row)
            cells.append("%s %s" % (value, unit) if unit and not nounits else "%s" % value)
        lines.append(", ".join(cells))
    return "".join(line + "\n" for line in lines)


def _fields(spec, table):
    names = [f.strip() for f in spec.split(",") if f.strip()]
    out = []
    for n in names:
        if n.lower() not in table:
            return None, n
        out.append(table[n.lower()])
    return out, None


def table(gpus, apps, settings=None):
    """The plain `nvidia-smi` report."""
    g0 = gpus[0] if gpus else None
    ver = g0["driver_version"] if g0 else "580.159.04"
    cuda = g0["cuda_version"] if g0 else "13.0"
    sep = "+-----------------------------------------+------------------------+----------------------+"
    full = "+-----------------------------------------------------------------------------------------+"
    out = [time.strftime("%a %b %e %H:%M:%S %Y") + "       ", full,
           "| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|" % (ver, ver, cuda),
           sep,
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                        |               MIG M. |",
           "|=========================================+========================+======================|"]
    for g in gpus:
        name = g["name"]
        if len(name) > 28:
            # nvidia-smi cuts long names: "NVIDIA RTX 6000 Ada Gene..."
            name = name[:24] + "..."
        b1 = ("%4d  %s" % (g["index"], name)).ljust(37) + "On  "
        b2 = ("%s Off " % g["pci_bus_id"]).rjust(24)
        b3 = "0".rjust(21) + " "
        out.append("|%s|%s|%s|" % (b1, b2, b3))
        left = " N/A   %2dC    P0" % g["temp"]
        right = "%dW / %4dW " % (int(g["power"]), g["power_cap_w"])
        b1 = left + right.rjust(41 - len(left))
        b2 = ("%dMiB / %dMiB " % (g["used_mib"], g["memory_mib"])).rjust(24)
        b3 = ("%d%%" % g["util"]).rjust(8) + "Default".rjust(13) + " "
        out.append("|%s|%s|%s|" % (b1, b2, b3))
        out.append("|%s|%s|%s|" % (" " * 41, " " * 24, "Disabled".rjust(21) + " "))
        out.append(sep)
    out += ["",
            full,
            "| Processes:                                                                              |",
            "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
            "|        ID   ID                                                               Usage      |",
            "|=========================================================================================|"]
    if not apps:
        out.append("|  No running processes found                                                             |")
    for a in apps:
        name = a["process_name"]
        if len(name) > 35:
            name = "..." + name[-32:]
        mem = "%dMiB" % a["used_mib"]
        line = "|%5d   N/A  N/A %15d %6s   %s" % (a["gpu_index"], a["pid"], "C", name.ljust(35))
        line += mem.rjust(89 - len(line)) + " |"
        out.append(line)
    out.append(full)
    return "\n".join(out) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    query_gpu = query_apps = fmt = ids = None
    list_gpus = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        val = None
        if "=" in arg and arg.startswith("--"):
            arg, val = arg.split("=", 1)
        if arg in ("-h", "--help"):
            sys.stdout.write("NVIDIA System Management Interface -- v580.159.04 (sglang_sim stand-in)\n"
                             "Supported: --query-gpu=, --query-compute-apps=, --format=csv[,noheader]"
                             "[,nounits], -i/--id=, -L/--list-gpus\n")
            return 0
        if arg in ("-L", "--list-gpus"):
            list_gpus = True
        elif arg in ("--query-gpu", "--query-compute-apps", "--format", "-i", "--id"):
            if val is None:
                i += 1
                if i >= len(argv):
                    sys.stdout.write(INVALID_ARGS)
                    return EXIT_INVALID_ARGS
                val = argv[i]
            if arg == "--query-gpu":
                query_gpu = val
            elif arg == "--query-compute-apps":
                query_apps = val
            elif arg == "--format":
                fmt = [f.strip() for f in val.split(",")]
            else:
                ids = val
        elif arg.startswith("-i") and len(arg) > 2:
            ids = arg[2:]
        else:
            sys.stdout.write(INVALID_ARGS)
            return EXIT_INVALID_ARGS
        i += 1
    try:
        settings = config.load_settings()
    except config.SimConfigError as exc:
        sys.stderr.write("nvidia-smi (sglang_sim): %s\n" % exc)
        return 9
    gpus, apps = snapshot(settings)
    selected = _select(gpus, ids)
    if selected is None or not selected:
        sys.stdout.write("No devices were found\n")
        return EXIT_NOT_FOUND
    chosen = set(g["index"] for g in selected)
    apps = [a for a in apps if a["gpu_index"] in chosen]
    if query_gpu is not None or query_apps is not None:
        if fmt is None or "csv" not in fmt or any(
                f not in ("csv", "noheader", "nounits") for f in fmt):
            sys.stdout.write(INVALID_ARGS)
            return EXIT_INVALID_ARGS
        if query_gpu is not None:
            specs, bad = _fields(query_gpu, _gpu_fields())
            if specs is None:
                sys.stdout.write('Field "%s" is not a valid field to query.\n\n' % bad)
                return EXIT_INVALID_ARGS
            sys.stdout.write(_csv(selected, specs, fmt))
        else:
            specs, bad = _fields(query_apps, APP_FIELDS)
            if specs is None:
                sys.stdout.write('Field "%s" is not a valid field to query.\n\n' % bad)
                return EXIT_INVALID_ARGS
            sys.stdout.write(_csv(apps, specs, fmt))
        return 0
    if list_gpus:
        for g in selected:
            sys.stdout.write("GPU %d: %s (UUID: %s)\n" % (g["index"], g["name"], g["uuid"]))
        return 0
    sys.stdout.write(table(selected, apps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
