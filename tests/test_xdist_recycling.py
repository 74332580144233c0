"""The suite's worker recycling (tests/xdist_recycling.py) is on."""

import os
import re

from tests import xdist_recycling

pytest_plugins = ["pytester"]


def test_the_xdist_internals_it_uses_are_there():
    # pytest-xdist is pinned; a version without these would silently run
    # plain `loadfile` (workers growing to 10 GB): fail here instead.
    from xdist.dsession import DSession
    from xdist.scheduler import LoadFileScheduling
    from xdist.workermanage import WorkerController

    assert callable(DSession._clone_node) and callable(DSession.report_line)
    assert callable(WorkerController.ensure_teardown)
    for name in ("_reschedule", "_pending_of", "remove_node", "_assign_work_unit"):
        assert callable(getattr(LoadFileScheduling, name)), name


def test_a_worker_is_measured_by_the_process_id_it_wrote(tmp_path, monkeypatch):
    monkeypatch.setenv(xdist_recycling.PIDS, str(tmp_path))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    xdist_recycling.register_worker()
    assert (tmp_path / "gw7").read_text() == str(os.getpid())
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    expected = pages * os.sysconf("SC_PAGE_SIZE") // 2**20
    assert abs(xdist_recycling.resident_mb("gw7") - expected) <= 2
    assert xdist_recycling.resident_mb("gw8") == 0  # never registered


# A run of its own (`pytester`): 8 files of 2 tests each under `-n 2`. The
# first file's first test holds 150 MB, past a 120 MB limit (a bare worker
# is about 40 MB), so its worker is retired after the two files xdist
# handed it at the start (files 0 and 2).
# The files from the fifth on, run on gw0 or gw1, wait until a test has run
# on a fresh worker: the other worker would otherwise run them all before
# the replacement is up (then no replacement is started, as none is needed).
_CONFTEST = """
import os, time
import pytest
from tests import xdist_recycling

GIVE_UP = time.monotonic() + 20  # a failing run waits once, not per test

def pytest_configure(config):
    xdist_recycling.register_worker()

@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return xdist_recycling.make_scheduler(config, log)

@pytest.fixture(autouse=True)
def ran(request):
    folder, worker = os.environ["RAN"], os.environ["PYTEST_XDIST_WORKER"]
    with open(os.path.join(folder, worker), "a") as f:
        f.write(request.node.nodeid + "\\n")
    while (
        request.module.LATE
        and worker in ("gw0", "gw1")
        and not set(os.listdir(folder)) - {"gw0", "gw1"}
        and time.monotonic() < GIVE_UP
    ):
        time.sleep(0.05)
"""

_TESTS = """
LATE = {late}
HELD = []

def test_a():
    HELD.append(b"x" * ({mb} << 20))

def test_b():
    pass
"""


def test_a_grown_worker_is_replaced_and_every_test_runs_once(
    pytester, tmp_path, monkeypatch
):
    ran, pids = tmp_path / "ran", tmp_path / "pids"
    ran.mkdir(), pids.mkdir()
    pytester.makeconftest(_CONFTEST)
    files = {
        f"test_{i}": _TESTS.format(late=i >= 4, mb=150 if i == 0 else 0)
        for i in range(8)
    }
    pytester.makepyfile(**files)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name, value in [
        ("PYTHONPATH", root),
        ("RAN", str(ran)),
        (xdist_recycling.PIDS, str(pids)),
        (xdist_recycling.LIMIT, "120"),
        ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1"),  # 3 s less to start a worker
    ]:
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)

    result = pytester.runpytest_subprocess(
        "-p", "xdist", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider"
    )

    result.assert_outcomes(passed=16)
    runs = {w.name: w.read_text().split() for w in ran.iterdir()}
    ids = sorted(i for tests in runs.values() for i in tests)
    assert ids == sorted(f"test_{i}.py::test_{t}" for i in range(8) for t in "ab")
    output = "\n".join(result.outlines)
    retired = re.findall(r"worker (gw\d) is at (\d+) MB \(limit 120\)", output)
    assert len(retired) == 1 and int(retired[0][1]) > 120, output
    worker = retired[0][0]
    # The grown worker ran the two files it held, then was sent no more.
    assert sorted(runs[worker]) == [
        "test_0.py::test_a",
        "test_0.py::test_b",
        "test_2.py::test_a",
        "test_2.py::test_b",
    ]
    assert runs.keys() - {"gw0", "gw1"}, runs  # a fresh worker ran tests
