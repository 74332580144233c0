"""Suite-wide fixtures: each test module leaves the worker as it found it.

With `--dist loadfile` one worker process runs many modules in turn; what a
module keeps alive (its models, TensorFlow's traced functions, an export
server subprocess) would otherwise stay until the worker ends, and the
real checkpoints' modules (SmolLM2, MiniLM) took a worker past 12 GB.

`KT_TEST_MEMLOG=path` appends each module's resident memory (before, after,
after release) to `path`, one line a module, to find what grows.
"""

import atexit
import ctypes
import gc
import os
import shutil
import tempfile
import time

import pytest

from tests import xdist_recycling

# glibc gives each of TensorFlow's many threads a malloc arena of its own,
# and freed memory stays in them: the two long-lived test workers' resident
# memory grew to 9-12 GB each. Two arenas keep it down. Set here, in the
# process that starts the workers (and their subprocesses) before it does.
os.environ.setdefault("MALLOC_ARENA_MAX", "2")
# TensorFlow's oneDNN build allocates large tensors from a pool of its own
# that keeps every page it ever held: a worker's resident memory was the
# sum of the modules' peaks (12 GB, and an OOM kill), not their maximum.
# oneDNN's kernels are kept; only their memory comes from malloc, which
# gives it back (a 355M-parameter model freed: 2.1 GB kept before, 0 now).
os.environ.setdefault("TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "1")
# Where the workers say their process ids (see tests/xdist_recycling.py).
if "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ[xdist_recycling.PIDS] = tempfile.mkdtemp(prefix="kt-workers-")
    atexit.register(shutil.rmtree, os.environ[xdist_recycling.PIDS], True)

try:
    _LIBC = ctypes.CDLL("libc.so.6")
except OSError:  # not glibc
    _LIBC = None


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20


def pytest_configure(config):
    xdist_recycling.register_worker()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return xdist_recycling.make_scheduler(config, log)


@pytest.fixture(scope="module", autouse=True)
def _release_after_module(request):
    # Imported here: the xdist controller, which runs no test, stays
    # without TensorFlow (600 MB).
    from tests import helpers

    before, start = _rss_mb(), time.monotonic()
    yield
    after = _rss_mb()
    helpers.close_export_servers()
    gc.collect()
    if _LIBC is not None:
        # Freed memory returns to the system only when glibc is asked to.
        _LIBC.malloc_trim(0)
    log = os.environ.get("KT_TEST_MEMLOG")
    if log:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(log, "a") as f:
            f.write(
                f"{worker} {request.module.__name__} {before} {after} "
                f"{_rss_mb()} {time.monotonic() - start:.0f}s\n"
            )


@pytest.fixture(autouse=True)
def _no_compile_cache_leaks():
    """A test (or docs example) that calls `kt.generation.enable_compile_cache`
    leaves `TF_XLA_FLAGS` as it found it, for the processes later tests
    start."""
    before = os.environ.get("TF_XLA_FLAGS")
    yield
    if before is None:
        os.environ.pop("TF_XLA_FLAGS", None)
    else:
        os.environ["TF_XLA_FLAGS"] = before
