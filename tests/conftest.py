"""Shared fixtures: the sandbox Slurm cluster for tests marked ``@pytest.mark.slurm``.

Fixtures (use them by name; a ``slurm``-marked test gets ``sandbox`` without asking):

``sandbox``
    The running sandbox of the test's lane (``slurmtrain.sandbox.SandboxInfo``; see
    Lanes below), brought up with the defaults (2 nodes, ``stnode1`` and ``stnode2``, 4 CPUs each; partitions debug,
    low, high) if none runs. Any running sandbox is accepted, with or without
    accounting. ``os.environ["SLURM_CONF"]`` points at it, so ``sbatch``, ``srun``,
    ``squeue`` and ``scontrol`` in tests and in subprocesses talk to it.
``sandbox_accounting``
    Like ``sandbox`` but with MariaDB + slurmdbd, so ``sacct`` works. Restarts the
    sandbox with ``--accounting`` if it runs without (a few seconds; the first time
    on a machine also initialises MariaDB).
``sandbox_no_accounting``
    A sandbox without accounting, where ``sacct`` fails as on some real clusters.
    Restarts it if it runs with accounting.
``sandbox_three_nodes``
    A sandbox of its own with three nodes (module-scoped, in ``THREE_NODES_DIR``: its own
    ports and job ids), taken down after the file; for runs with a spare node.
``sandbox_networked``
    Likewise, two networked nodes (``NETWORKED_DIR``; netns.py): each its own network
    namespace, hostname, /tmp and /dev/shm.

While the Slurm tests run, a thread per sandbox releases every requeued job from Slurm's
~2-minute hold 5 s after its requeue (tests/slurm_hold.py).

Lanes. Under ``pytest -n 3`` (or more) the Slurm test files are split into two lanes
(``SECOND_LANE`` in tests/lanes.py), each run by one xdist worker against its own sandbox: the
first lane's in the default state directory, the second's in ``SECOND_LANE_DIR`` (its
own ports and job ids; the same node names). Under ``-n 4`` (scripts/test.sh) a third lane
runs the files that bring up sandboxes of their own (``THIRD_LANE``: networked nodes, three
nodes); under ``-n 3`` they are the second lane's. Under ``-n 5`` the three-node file has a fourth
lane (``FOURTH_LANE``). With fewer workers, or none, every Slurm
test uses the default sandbox. A module-scoped fixture that submits jobs must ask for
``_sandbox_session``: the lane's sandbox, with ``SLURMTRAIN_SANDBOX_DIR`` and
``SLURM_CONF`` set for the file's duration (module fixtures run before the ``sandbox``
fixture that every Slurm test gets).

Where the sandbox cannot be had (not root, not Linux, no Slurm and no apt-get) these
tests skip with the reason; with ``CI=true`` in the environment they fail instead,
so CI never passes by skipping them. The sandbox is left running at the end of the
session (cheap to reuse on the next run; a CI machine is thrown away).

The first lane's state directory is ``/var/lib/slurmtrain-sandbox`` unless
``SLURMTRAIN_SANDBOX_DIR`` says otherwise when pytest starts.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from lanes import FIRST_LANE_DIR, SECOND_LANE_DIR, lane

# The runs a user submitted, remembered for lookups from any directory (slurmtrain/recent.py): the
# tests' own, apart from the machine user's, and each test's apart from the others' (below).
os.environ["SLURMTRAIN_STATE_DIR"] = tempfile.mkdtemp(prefix="slurmtrain-state-")
atexit.register(shutil.rmtree, os.environ["SLURMTRAIN_STATE_DIR"], True)  # one a process: /tmp kept them all


@pytest.fixture(autouse=True)
def _own_recent_runs(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SLURMTRAIN_STATE_DIR", str(tmp_path_factory.mktemp("state")))


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _unavailable(reason: str):
    """Skip, or under CI=true fail: a CI run must not pass by skipping Slurm tests."""
    if _ci():
        pytest.fail(f"the Slurm sandbox is needed under CI=true but cannot be had: {reason}",
                    pytrace=False)
    print(f"\nskipping: Slurm sandbox unavailable: {reason}")
    pytest.skip(f"Slurm sandbox unavailable: {reason}")


def _bring_up(accounting: bool | None):
    """A running sandbox; ``accounting`` None accepts either mode, else restarts to match."""
    from slurmtrain import sandbox

    reason = sandbox.unavailable_reason(accounting=bool(accounting))
    if reason:
        _unavailable(reason)
    info = sandbox.status() if sandbox.is_up() else None
    if info is not None and accounting is not None and info.settings.accounting != accounting:
        sandbox.down(progress=_progress)
        info = None
    if info is None:
        try:
            if sandbox.status() is not None:  # half-up: some daemon died; start over
                sandbox.down(progress=_progress)
            info = sandbox.up(accounting=bool(accounting), progress=_progress)
        except sandbox.SandboxUnavailable as err:
            _unavailable(str(err))
    os.environ["SLURM_CONF"] = str(info.slurm_conf)
    return info


def _clear_queue(info) -> None:
    """Cancel every job the sandbox's controller recovered from its saved state: jobs of an
    earlier, interrupted run (a requeued one, eligible again, would take the nodes from this
    run's tests for minutes). Called once per sandbox and test session, before its first test."""
    env = {**os.environ, "SLURM_CONF": str(info.slurm_conf)}

    def queued() -> list[str]:
        proc = subprocess.run(["squeue", "-h", "-a", "-o", "%i"], capture_output=True, text=True,
                              timeout=30, env=env)
        return proc.stdout.split()

    left = queued()
    if not left:
        return
    _progress(f"cancelling {len(left)} job(s) left from an earlier run: {', '.join(left)}")
    subprocess.run(["scancel", *left], capture_output=True, timeout=30, env=env)
    deadline = time.monotonic() + 120
    while queued() and time.monotonic() < deadline:
        time.sleep(1)


# The container tests run only in the container lane (scripts/container_lane.sh), as an
# ordinary user inside its Debian 13 tree, where apptainer can run: this Debian 12 machine
# has none, and root cannot run it here. Not collected elsewhere (so never a skip).
# So are tests/remote (a laptop user reaching the lane's login node over ssh).
# And the Slurm-version lane's own tests (e2e/*_24.py: what the suite shows on 22.05 otherwise).
collect_ignore_glob = ([] if os.environ.get("SLURMTRAIN_CONTAINER_TESTS") else ["containers/*"]) + \
    ([] if os.environ.get("SLURMTRAIN_REMOTE_TESTS") else ["remote/*"]) + \
    ([] if os.environ.get("SLURMTRAIN_SLURM_LANE_TESTS") else ["e2e/*_24.py"])

def _progress(message: str) -> None:
    print(f"sandbox: {message}")


def pytest_report_header(config):
    try:
        from slurmtrain import sandbox
    except Exception as err:  # noqa: BLE001 - a header must never break collection
        return f"slurm sandbox: cannot import slurmtrain.sandbox ({err})"
    reason = sandbox.unavailable_reason()
    where = sandbox.state_dir()
    if reason:
        verdict = "FAIL (CI=true)" if _ci() else "skip"
        return f"slurm sandbox: unavailable, `slurm` tests will {verdict}: {reason}"
    return f"slurm sandbox: available ({where}; {'up' if sandbox.is_up() else 'will start on first use'})"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the group marks
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, work goes out in groups (``--dist loadgroup``): each Slurm lane
    is one group, run by one worker in file order (a lane's tests share one sandbox: some
    restart it, some take all its nodes); every other file is a group of its own, so its
    module fixtures (a DeepSpeed or pipeline reference run) run once, not once per worker
    that happens to get one of its tests. The groups are handed out in item order (with
    ``--no-loadscope-reorder``, as scripts/test.sh runs): the Slurm lanes first, so they
    start at once and wait on Slurm while the computing files run beside them; then the
    files with the most ``slow`` tests, so no long file starts last."""
    if not hasattr(config, "workerinput"):
        return
    slow: dict[str, int] = {}
    for item in items:
        key = str(item.path)
        slow[key] = slow.get(key, 0) + (item.get_closest_marker("slow") is not None)

    def order(item) -> tuple:
        name = lane(config, item.path) if item.get_closest_marker("slurm") is not None else None
        return (0, name) if name else (1, -slow[str(item.path)])

    for item in items:
        group = lane(config, item.path) if item.get_closest_marker("slurm") is not None else \
            os.path.relpath(str(item.path), str(config.rootpath)).replace(os.sep, "/")
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=order)  # stable: file order within each group


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """``SLURMTRAIN_TEST_TIMELINE=FILE``: a JSON line per test (worker, start, end, test), to
    see which worker's tests end last: which lane, or the computing tests, bound the suite's time."""
    path = os.environ.get("SLURMTRAIN_TEST_TIMELINE")
    start = time.time()
    yield
    if path:
        import json
        line = json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "start": round(start, 1),
                           "end": round(time.time(), 1), "test": item.nodeid})
        with open(path, "a") as f:
            f.write(line + "\n")


_LANES: dict[str, object] = {}  # lane -> its sandbox's SandboxInfo, once brought up


def _enter_lane(name: str) -> None:
    """Point this process (and the commands it starts) at the lane's sandbox."""
    state_dir = SECOND_LANE_DIR if name == "slurm2" else FIRST_LANE_DIR
    if state_dir is None:
        os.environ.pop("SLURMTRAIN_SANDBOX_DIR", None)
    else:
        os.environ["SLURMTRAIN_SANDBOX_DIR"] = state_dir


@pytest.fixture(scope="session")
def _releasers():
    """One thread per sandbox in use releases its requeued jobs 5 s after their requeue,
    not after Slurm's ~2 min hold (tests/slurm_hold.py)."""
    threads = []
    yield threads
    for t in threads:
        t.stop()


@pytest.fixture(scope="module")
def _sandbox_session(request, _releasers):
    """The running sandbox of this test file's lane; brought up on the lane's first use."""
    name = lane(request.config, request.path)
    saved = {k: os.environ.get(k) for k in ("SLURMTRAIN_SANDBOX_DIR", "SLURM_CONF")}
    _enter_lane(name)
    if name not in _LANES:
        info = _bring_up(None)
        _clear_queue(info)
        from slurm_hold import Releaser
        releaser = Releaser(str(info.slurm_conf))
        releaser.start()
        _releasers.append(releaser)
        _LANES[name] = info
    os.environ["SLURM_CONF"] = str(_LANES[name].slurm_conf)
    yield _LANES[name]
    for key, value in saved.items():  # the next file may be another lane's, or compute only
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def sandbox(_sandbox_session):
    """A running sandbox, either mode (see the module docstring)."""
    from slurmtrain import sandbox as lib

    if lib.is_up():  # cheap: pid files only
        os.environ["SLURM_CONF"] = str(_sandbox_session.slurm_conf)
        return lib.status() or _sandbox_session
    return _bring_up(None)  # an earlier test took it down


@pytest.fixture
def sandbox_accounting(_sandbox_session):
    """The lane's sandbox, with slurmdbd, so that sacct works."""
    return _bring_up(True)


@pytest.fixture
def sandbox_no_accounting(_sandbox_session):
    """The lane's sandbox without accounting (sacct fails)."""
    return _bring_up(False)


THREE_NODES_DIR = "/var/lib/slurmtrain-sandbox-3nodes"  # its own ports and job ids (from 501): beside the lanes'
NETWORKED_DIR = "/var/lib/slurmtrain-sandbox-net"


def _own_sandbox(state_dir: str, **settings):
    """A sandbox of its own in ``state_dir`` (its own ports and job ids), up for one test file
    and taken down after it, with its requeued jobs released 5 s after the requeue."""
    from slurmtrain import sandbox as lib

    saved = {k: os.environ.get(k) for k in ("SLURMTRAIN_SANDBOX_DIR", "SLURM_CONF")}
    os.environ["SLURMTRAIN_SANDBOX_DIR"] = state_dir
    reason = lib.unavailable_reason()
    if reason:
        _unavailable(reason)
    try:
        if lib.status() is not None:  # left from an interrupted run, perhaps with a killed node
            lib.down(progress=_progress)
        info = lib.up(progress=_progress, **settings)
    except lib.SandboxUnavailable as err:
        _unavailable(str(err))
    os.environ["SLURM_CONF"] = str(info.slurm_conf)
    _clear_queue(info)
    from slurm_hold import Releaser
    releaser = Releaser(str(info.slurm_conf))  # as the lanes'
    releaser.start()
    yield info
    releaser.stop()
    lib.down(progress=_progress)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def sandbox_three_nodes():
    """Three nodes (a run on two and a spare), in ``THREE_NODES_DIR``, for one test file; a
    test kills its nodes."""
    yield from _own_sandbox(THREE_NODES_DIR, nodes=3)


@pytest.fixture(scope="module")
def sandbox_networked(tmp_path_factory):
    """Three networked nodes (``sandbox up --network``: a namespace each, eth0 on a bridge,
    its hostname, a private /tmp and /dev/shm; two for a run and a spare), in
    ``NETWORKED_DIR``, for one test file."""
    tmp_path_factory.getbasetemp()  # made before `up`: the nodes see pytest's folders under /tmp
    yield from _own_sandbox(NETWORKED_DIR, nodes=3, network=True)


@pytest.fixture(autouse=True)
def _slurm_marker(request):
    """Give every ``@pytest.mark.slurm`` test a sandbox, unless it asks for a specific one."""
    if request.node.get_closest_marker("slurm") is None:
        return
    names = request.fixturenames
    if not any(n in names for n in ("sandbox", "sandbox_accounting", "sandbox_no_accounting", "sandbox_three_nodes",
                                    "sandbox_networked")):
        request.getfixturevalue("sandbox")
