"""The suite's worker recycling (tests/xdist_recycling.py) is on."""

import os

from tests import xdist_recycling


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
