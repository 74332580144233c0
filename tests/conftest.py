"""Suite-wide fixtures: each test module leaves the worker as it found it.

With `--dist loadfile` one worker process runs many modules in turn; what a
module keeps alive (its models, TensorFlow's traced functions, an export
server subprocess) would otherwise stay until the worker ends, and the
real checkpoints' modules (SmolLM2, MiniLM) took a worker past 12 GB.
"""

import gc
import os

import pytest

from tests import helpers

# glibc gives each of TensorFlow's many threads a malloc arena of its own,
# and freed memory stays in them: the two long-lived test workers' resident
# memory grew to 9-12 GB each. Two arenas keep it down. Set here, in the
# process that starts the workers (and their subprocesses) before it does.
os.environ.setdefault("MALLOC_ARENA_MAX", "2")


@pytest.fixture(scope="module", autouse=True)
def _release_after_module():
    yield
    helpers.close_export_servers()
    gc.collect()
