"""Suite-wide fixtures: each test module leaves the worker as it found it.

With `--dist loadfile` one worker process runs many modules in turn; what a
module keeps alive (its models, TensorFlow's traced functions, an export
server subprocess) would otherwise stay until the worker ends, and the
real checkpoints' modules (SmolLM2, MiniLM) took a worker past 12 GB.
"""

import gc

import pytest

from tests import helpers


@pytest.fixture(scope="module", autouse=True)
def _release_after_module():
    yield
    helpers.close_export_servers()
    gc.collect()
