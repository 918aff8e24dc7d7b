# -*- coding: utf-8 -*-
# Copyright (c) 2026, blackwell.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
# Do not use this from other collections or standalone plugins/modules!

"""nvidia-smi query formats and their parsers, shared by gpu_info and gpu_free.

The parsers are pure functions of the text nvidia-smi prints, tested against captures from
a real H200 node (tests/fixtures/nvidia-h200/). `query()` runs the two CSV queries through a
caller-supplied runner, so modules decide how commands run and tests can feed canned output.
Stdlib only, Python >= 3.9.
"""

from __future__ import annotations

GPU_FIELDS = ("index", "uuid", "name", "memory.used", "memory.total", "compute_cap", "driver_version")
APP_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
CSV_FORMAT = "--format=csv,noheader,nounits"

# Known failure texts -> (cause, what to do). nvidia-smi prints these on stdout.
_ERRORS = (
    ("couldn't communicate with the nvidia driver", "driver_not_loaded",
     "the NVIDIA kernel driver is not loaded or not installed: install the driver for this GPU "
     "(and reboot after an upgrade), then check `lsmod | grep nvidia`"),
    ("driver/library version mismatch", "driver_library_mismatch",
     "the loaded kernel module and the user-space NVML library differ (typically after a driver "
     "upgrade without reboot): reboot the node or reload the nvidia kernel modules"),
    ("no devices were found", "no_devices",
     "the driver sees no GPU: check that the GPU is attached (lspci | grep -i nvidia), passed "
     "through to this VM/container, and not disabled"),
    ("gpu is lost", "gpu_lost",
     "a GPU fell off the bus (Xid 79): reboot the node to recover it"),
    ("unable to determine the device handle", "gpu_unreachable",
     "a GPU does not answer (check `dmesg` for Xid errors); a reboot usually recovers it"),
    ("insufficient permissions", "permission_denied",
     "the user running the task may not open /dev/nvidia*: run with become or fix the device permissions"),
    ("failed to initialize nvml", "nvml_init_failed",
     "NVML could not start: check that the driver is loaded and, in a container, that the NVIDIA "
     "runtime mounts the devices and libraries"),
)

_NOT_AVAILABLE = ("", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]")


class NvidiaSmiError(Exception):
    """nvidia-smi failed; `cause` is a short machine-readable key, `hint` says what to fix."""

    def __init__(self, cause, message, hint=None, rc=None, output=None):
        super(NvidiaSmiError, self).__init__(message)
        self.cause = cause
        self.message = message
        self.hint = hint
        self.rc = rc
        self.output = output

    def describe(self):
        text = self.message
        if self.hint:
            text += "; " + self.hint
        return text


def query_gpu_argv(nvidia_smi, fields=GPU_FIELDS):
    return [nvidia_smi, "--query-gpu=" + ",".join(fields), CSV_FORMAT]


def query_apps_argv(nvidia_smi, fields=APP_FIELDS):
    return [nvidia_smi, "--query-compute-apps=" + ",".join(fields), CSV_FORMAT]


def to_int(value):
    """Integer from a CSV cell, None for N/A-like cells ("[N/A]", "[Not Supported]")."""
    text = (value or "").strip()
    if text.lower() in _NOT_AVAILABLE:
        return None
    # With `nounits` there is no unit, but be lenient with "20998 MiB".
    if text.endswith("MiB"):
        text = text[:-3].strip()
    try:
        return int(text)
    except ValueError:
        try:
            return int(float(text))
        except ValueError:
            return None


def to_text(value):
    text = (value or "").strip()
    return None if text.lower() in _NOT_AVAILABLE else text


def _rows(text):
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            yield [cell.strip() for cell in line.split(",")]


def _split_fixed(cells, head, tail):
    """Fixed fields at both ends, the free-text field (a name that may hold commas) in the
    middle. Returns (head_cells, middle, tail_cells) or None when the row is too short."""
    if len(cells) < head + tail + 1:
        return None
    middle = ", ".join(cells[head:len(cells) - tail])
    return cells[:head], middle, cells[len(cells) - tail:]


def classify_error(rc, output):
    """NvidiaSmiError for a failed run or None. `output` is stdout+stderr."""
    lowered = (output or "").lower()
    for needle, cause, hint in _ERRORS:
        if needle in lowered:
            first = next((ln.strip() for ln in (output or "").splitlines() if needle in ln.lower()), needle)
            return NvidiaSmiError(cause, "nvidia-smi failed: %s (rc=%s)" % (first, rc), hint, rc, output)
    if rc != 0:
        tail = " ".join((output or "").strip().splitlines()[-3:]) or "no output"
        return NvidiaSmiError("nvidia_smi_failed", "nvidia-smi failed with rc=%s: %s" % (rc, tail), None, rc, output)
    return None


def looks_like_error(text):
    """True when CSV output is really an error text (nvidia-smi sometimes exits 0 with it)."""
    return classify_error(0, text) is not None


def parse_gpus(text, fields=GPU_FIELDS):
    """Rows of `--query-gpu=<fields> --format=csv,noheader,nounits` into dicts with
    index, uuid, name, memory_used_mib, memory_total_mib, compute_cap, driver_version.
    A field missing from `fields` (old drivers lack compute_cap) comes back as None."""
    fields = tuple(fields)
    name_at = fields.index("name")
    gpus = []
    for cells in _rows(text):
        split = _split_fixed(cells, name_at, len(fields) - name_at - 1)
        if split is None:
            raise ValueError("unexpected nvidia-smi --query-gpu row: %r" % ",".join(cells))
        head, name, tail = split
        values = dict(zip(fields[:name_at], head))
        values["name"] = name
        values.update(zip(fields[name_at + 1:], tail))
        index = to_int(values.get("index"))
        if index is None:
            raise ValueError("unexpected nvidia-smi --query-gpu row (no index): %r" % ",".join(cells))
        gpus.append({
            "index": index,
            "uuid": to_text(values.get("uuid")),
            "name": to_text(values.get("name")),
            "memory_used_mib": to_int(values.get("memory.used")),
            "memory_total_mib": to_int(values.get("memory.total")),
            "compute_cap": to_text(values.get("compute_cap")),
            "driver_version": to_text(values.get("driver_version")),
        })
    return sorted(gpus, key=lambda g: g["index"])


def parse_compute_apps(text, gpus=()):
    """Rows of `--query-compute-apps=pid,process_name,used_memory,gpu_uuid` into dicts,
    with gpu_index looked up from `gpus` (None when unknown). used_memory is None where
    the driver hides it (containers without the host pid namespace show [N/A])."""
    index_of = dict((g["uuid"], g["index"]) for g in gpus or ())
    apps = []
    for cells in _rows(text):
        if len(cells) == 1 and cells[0].lower().startswith("no running"):
            continue
        split = _split_fixed(cells, 1, 2)
        if split is None:
            raise ValueError("unexpected nvidia-smi --query-compute-apps row: %r" % ",".join(cells))
        head, name, tail = split
        uuid = to_text(tail[1])
        apps.append({
            "pid": to_int(head[0]),
            "process_name": name,
            "used_memory_mib": to_int(tail[0]),
            "gpu_uuid": uuid,
            "gpu_index": index_of.get(uuid),
        })
    return apps


def memory_by_gpu(gpus):
    """[{index, uuid, memory_used_mib, memory_total_mib}] -- the part gpu_free reports."""
    return [dict((k, g.get(k)) for k in ("index", "uuid", "memory_used_mib", "memory_total_mib")) for g in gpus]


def busy_gpus(gpus, idle_memory_mib=0):
    """GPUs whose used memory is above `idle_memory_mib` (unknown memory counts as idle:
    nothing better can be known about it)."""
    return [g for g in gpus if g.get("memory_used_mib") is not None and g["memory_used_mib"] > idle_memory_mib]


def query(runner, nvidia_smi):
    """Run both CSV queries. `runner(argv) -> (rc, stdout, stderr)`.

    Returns {gpus, compute_apps, driver_version, gpu_count, memory_used_mib_total,
    memory_total_mib_total}. Raises NvidiaSmiError with a cause and a hint on failure,
    including `no_devices` when the driver lists no GPU."""
    fields = GPU_FIELDS
    rc, out, err = runner(query_gpu_argv(nvidia_smi, fields))
    if rc != 0 and "compute_cap" in (out + err) and "not a valid field" in (out + err).lower():
        # Drivers before 510 do not know compute_cap; ask again without it.
        fields = tuple(f for f in GPU_FIELDS if f != "compute_cap")
        rc, out, err = runner(query_gpu_argv(nvidia_smi, fields))
    error = classify_error(rc, out + "\n" + err)
    if error is not None:
        raise error
    try:
        gpus = parse_gpus(out, fields)
    except ValueError as exc:
        raise NvidiaSmiError("unparsable_output", "could not parse nvidia-smi output: %s" % exc, rc=rc, output=out)
    if not gpus:
        raise NvidiaSmiError("no_devices", "nvidia-smi lists no GPU", dict((c, h) for dummy, c, h in _ERRORS)["no_devices"],
                             rc=rc, output=out)

    rc, out, err = runner(query_apps_argv(nvidia_smi))
    error = classify_error(rc, out + "\n" + err)
    if error is not None:
        raise error
    try:
        apps = parse_compute_apps(out, gpus)
    except ValueError as exc:
        raise NvidiaSmiError("unparsable_output", "could not parse nvidia-smi output: %s" % exc, rc=rc, output=out)

    drivers = sorted(set(g["driver_version"] for g in gpus if g["driver_version"]))
    used = [g["memory_used_mib"] for g in gpus if g["memory_used_mib"] is not None]
    total = [g["memory_total_mib"] for g in gpus if g["memory_total_mib"] is not None]
    return {
        "gpus": gpus,
        "compute_apps": apps,
        "driver_version": drivers[0] if drivers else None,
        "gpu_count": len(gpus),
        "memory_used_mib_total": sum(used),
        "memory_total_mib_total": sum(total),
    }
