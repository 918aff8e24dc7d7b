"""The shared-memory segments a rank of SGLang 0.5.23 leaves in /dev/shm.

SGLang tears its processes down with SIGKILL (srt/utils/common.py kill_process_tree, and
PR_SET_PDEATHSIG=SIGKILL in kill_itself_when_parent_died), which skips every unlink, so what a
rank creates stays in /dev/shm when it dies. A rank here creates the same families under the
same names, maps them as the real ones are mapped, and unlinks on a clean exit exactly what the
release unlinks then. Names and creators, from the 0.5.23 wheel:

  sglang_loads_<instance_id>_<blake2s4>.shm  srt/managers/load_snapshot.py shm_path_for, opened by
      ShmLoadSnapshotWriter.__init__ (os.open O_CREAT 0600, ftruncate, mmap) from
      create_load_snapshot_writer, which the rank-zero scheduler calls in
      Scheduler.init_ipc_channels (srt/managers/scheduler.py) before its model worker starts.
      Nothing in the release ever unlinks it, on any exit.
  sgl_shm_mq_<pid>_<rand8>  srt/distributed/device_communicators/shm_broadcast.py
      ShmRingBuffer.__init__ (SharedMemory(create=True, name=make_shm_name("mq")),
      srt/utils/stale_shm_cleanup.py make_shm_name): the message queue the first rank of a
      TP group > 1 broadcasts through; its creator unlinks it in ShmRingBuffer.__del__.
  nccl-XXXXXX  NCCL's shared-memory transport between ranks of one node (libnccl, not part of
      the wheel: ncclShmOpen makes "/dev/shm/nccl-XXXXXX" with mkstemp); TP > 1 only, removed by
      NCCL when the communicator is destroyed.
  cuda.shm.<...>  the CUDA driver's segment for CUDA IPC (libcuda, not part of the wheel), which
      TP ranks use for the custom all-reduce's buffers
      (srt/distributed/device_communicators/custom_all_reduce.py, cudaIpcGetMemHandle); the
      layout after "cuda.shm." is the driver's own, so nothing reads a pid out of it.
  sem.loky-<pid>-<rand>  a POSIX semaphore of loky (joblib's process pool, a dependency, not
      SGLang's own code): glibc's sem_open keeps "loky-..." as /dev/shm/sem.loky-...; loky's
      resource tracker unlinks it on a clean exit.

0.5.23's own sweep (srt/utils/stale_shm_cleanup.py, CI only) lists exactly these families:
pid-stamped ``sgl_shm_*`` (and ``multi_tokenizer_args_<pid>``, which only the multi-tokenizer
mode writes) and the pid-less ``_ORPHAN_PREFIXES``. Sizes are the simulator's: ``shm_kib`` KiB
each (SGLANG_SIM_SHM_KIB), in ``shm_dir`` (SGLANG_SIM_SHM_DIR); the load-snapshot file has the
release's own size (load_snapshot.py file_size: 12-byte header + one 16 KiB slot per DP rank).
"""

import hashlib
import mmap
import os
import random
import string
import uuid

LOAD_SNAPSHOT_SLOT = 16 * 1024  # load_snapshot.py SLOT_SIZE
LOAD_SNAPSHOT_HEADER = 12  # load_snapshot.py HEADER_STRUCT = struct.Struct("<4sHHI")


def new_instance_id():
    """server_args.py PortArgs.init_new: ``instance_id = uuid.uuid4().hex[:12]``."""
    return uuid.uuid4().hex[:12]


def load_snapshot_name(instance_id):
    """load_snapshot.py shm_path_for(ipc_name), the file name without /dev/shm/."""
    name = os.path.basename(instance_id.rstrip("/")) or "default"
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    digest = hashlib.blake2s(instance_id.encode(), digest_size=4).hexdigest()
    return "sglang_loads_%s_%s.shm" % (safe, digest)


def make_shm_name(kind, pid=None):
    """stale_shm_cleanup.py make_shm_name: ``sgl_shm_<kind>_<pid>_<uuid4 hex[:8]>``."""
    return "sgl_shm_%s_%d_%s" % (kind, os.getpid() if pid is None else pid, uuid.uuid4().hex[:8])


def _mkstemp(directory, prefix):
    """glibc mkstemp("<prefix>XXXXXX"): six random letters or digits, O_EXCL, mode 0600."""
    chars = string.ascii_letters + string.digits
    while True:
        path = os.path.join(directory, prefix + "".join(random.choices(chars, k=6)))
        try:
            return os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600), path
        except FileExistsError:
            continue


class Segments(object):
    """The segments one rank holds: created, written and mapped at start, left on SIGKILL."""

    def __init__(self, shm_dir, kib):
        self.shm_dir = shm_dir
        self.size = max(1, int(kib)) * 1024
        self.held = []  # (path, fd, map, unlinked_on_clean_exit)

    def _create(self, path, size, fd=None, on_clean_exit=True):
        if fd is None:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(fd, size)
        # Written through, so tmpfs holds the pages (a leak costs memory, as on a node).
        os.pwrite(fd, b"\1" * size, 0)
        mapped = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.held.append((path, fd, mapped, on_clean_exit))
        return path

    def create_rank(self, rank, tp_size, instance_id):
        """What a scheduler rank creates before its model loads (Scheduler.__init__:
        init_ipc_channels, then the model worker's distributed init)."""
        if not os.path.isdir(self.shm_dir):
            return []
        made = []
        if rank == 0:
            # ShmLoadSnapshotWriter: O_CREAT without O_EXCL, one slot per DP rank (dp_size 1).
            path = os.path.join(self.shm_dir, load_snapshot_name(instance_id))
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
            made.append(self._create(path, LOAD_SNAPSHOT_HEADER + LOAD_SNAPSHOT_SLOT, fd=fd,
                                     on_clean_exit=False))
            # loky's SemLock name, stored by sem_open under the sem. prefix (32 bytes in glibc).
            made.append(self._create(os.path.join(
                self.shm_dir, "sem.loky-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])), 32))
        if tp_size > 1:
            if rank == 0:
                made.append(self._create(os.path.join(self.shm_dir, make_shm_name("mq")), self.size))
            fd, path = _mkstemp(self.shm_dir, "nccl-")
            made.append(self._create(path, self.size, fd=fd))
            # The driver's name is per pid and rank: a segment left by a dead process whose pid
            # came round again is taken over, not refused (what the closed-source driver does
            # there is not known; refusing it would fail starts the release is not known to fail).
            path = os.path.join(self.shm_dir, "cuda.shm.0x%x.0x%x.%d" % (os.getuid(), os.getpid(), rank))
            fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_RDWR, 0o600)
            made.append(self._create(path, self.size, fd=fd))
        return made

    def close(self):
        """A clean exit: unlink what the release unlinks then (not the load-snapshot file)."""
        for path, fd, mapped, on_clean_exit in self.held:
            try:
                mapped.close()
                os.close(fd)
            except (OSError, ValueError):
                pass
            if on_clean_exit:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        self.held = []
