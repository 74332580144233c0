"""pytest-xdist's `--dist loadfile`, with workers retired when they grow.

A test worker's resident memory only grows: every function XLA compiles
stays in the process after the function is gone (about 2-4 MB each on
CPU, checked with TensorFlow 2.21; neither `keras.backend.clear_session`
nor a new eager context gives it back). Two workers that run the whole
suite reached 10 GB each on a 24 GB machine, and an OOM kill of one hung
xdist (its crash handling, pytest-xdist 3.8).

`RecyclingScheduling` hands out whole test files as `loadfile` does. When
a worker is due for its next file and its resident memory is past
`KT_TEST_WORKER_LIMIT_MB` (5000 by default), it is sent no more work: it
finishes the tests it holds (so its module fixtures are torn down as
usual), its process is ended, and a fresh worker is started in its place,
as xdist starts one for a crashed worker. Results are unchanged; a
replacement costs one collection (about 20 s on 2 cores).

Workers write their process id to `KT_TEST_WORKER_PIDS/<worker id>`
(`register_worker`), from which the controller reads their memory. This
uses xdist's scheduler internals (`assigned_work`, `workqueue`,
`_pending_of`, `DSession._clone_node`), pinned in setup.cfg; if they are
missing, `make_scheduler` returns None and xdist's own `loadfile` runs.
"""

import os

PIDS = "KT_TEST_WORKER_PIDS"
LIMIT = "KT_TEST_WORKER_LIMIT_MB"
DEFAULT_LIMIT_MB = 5000


def register_worker():
    """In a worker: writes its process id where the controller reads it."""
    worker, folder = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get(PIDS)
    if worker and folder and os.path.isdir(folder):
        with open(os.path.join(folder, worker), "w") as f:
            f.write(str(os.getpid()))


def resident_mb(worker_id):
    """A worker's resident memory in MB (0 when unknown)."""
    try:
        with open(os.path.join(os.environ[PIDS], worker_id)) as f:
            pid = int(f.read())
        with open(f"/proc/{pid}/statm") as f:
            pages = int(f.read().split()[1])
    except (KeyError, OSError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE") // 2**20


def make_scheduler(config, log):
    """A `RecyclingScheduling` for `--dist loadfile`, else None (xdist's)."""
    if config.getvalue("dist") != "loadfile" or not os.environ.get(PIDS):
        return None
    try:
        from xdist.scheduler import LoadFileScheduling
    except ImportError:
        return None
    dsession = config.pluginmanager.getplugin("dsession")
    internals = [(dsession, "_clone_node"), (dsession, "report_line")] + [
        (LoadFileScheduling, name)
        for name in ("_reschedule", "_pending_of", "remove_node")
    ]
    if not all(hasattr(owner, name) for owner, name in internals):
        return None
    limit = int(os.environ.get(LIMIT, DEFAULT_LIMIT_MB))

    class RecyclingScheduling(LoadFileScheduling):
        def __init__(self, config, log):
            super().__init__(config, log)
            self.retired = set()

        def _reschedule(self, node):
            if node not in self.registered_collections:
                return  # a fresh worker still collecting: work comes after
            due = (
                not node.shutting_down
                and self.workqueue
                and self._pending_of(self.assigned_work[node]) <= 2
            )
            memory = resident_mb(node.gateway.id) if due else 0
            if memory > limit:
                dsession.report_line(
                    f"\nworker {node.gateway.id} is at {memory} MB (limit "
                    f"{limit}): it ends after its file, a fresh one starts"
                )
                self.retired.add(node)
                node.shutdown()  # runs what it holds, then exits
                return
            super()._reschedule(node)

        def remove_node(self, node):
            crashed = super().remove_node(node)
            if node in self.retired:
                self.retired.discard(node)
                if crashed is None and self.workqueue:
                    dsession._clone_node(node)
                # A finished worker's process lives on until the session
                # ends (xdist tears gateways down then): end it now.
                node.ensure_teardown()
            return crashed

    return RecyclingScheduling(config, log)
