"""sglang_sim: a test double for an SGLang 0.5.23 server running on NVIDIA GPUs.

It speaks SGLang's CLI and HTTP API, models GPU memory and speculative-decoding
throughput, spawns per-rank processes that hold fake /dev/nvidia<N> files, and
ships a stand-in ``nvidia-smi``. Runtime is stdlib only.
"""

__version__ = "0.1.0"
# The SGLang release whose CLI, messages and HTTP shapes this simulator follows.
SGLANG_VERSION = "0.5.23"
