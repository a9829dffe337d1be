"""Every event written anywhere in ``slurmtrain/`` is one ``eventlog.Ev`` names: read from the
source (``ast``), each call that writes an event (``events.append(run_dir, NAME, ...)``,
the supervisor's ``self.event(NAME, ...)``, the stop contract's ``_event(NAME, ...)``, decide's ``(NAME, {fields})`` verdict events)
names it as ``Ev.X`` of a registered name, never as a string of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import slurmtrain
from slurmtrain import eventlog
from slurmtrain.eventlog import Ev

PACKAGE = Path(slurmtrain.__file__).parent


def _name_arg(call: ast.Call) -> ast.expr | None:
    """The argument that names the event, for the calls that write one."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in ("event", "_event") and call.args:
        return call.args[0]
    if isinstance(f, ast.Name) and f.id == "_event" and call.args:  # slurmtrain.stop's writer
        return call.args[0]
    if (isinstance(f, ast.Attribute) and f.attr == "append" and isinstance(f.value, ast.Name)
            and f.value.id == "events" and len(call.args) >= 2):
        return call.args[1]
    return None


def _verdict_events(tree: ast.AST) -> list[ast.expr]:
    """decide.py's events: the first item of each ``(NAME, {fields})`` pair."""
    return [t.elts[0] for t in ast.walk(tree) if isinstance(t, ast.Tuple) and len(t.elts) == 2
            and isinstance(t.elts[1], ast.Dict) and isinstance(t.elts[0], (ast.Constant, ast.Attribute))]


def written_names(root: Path = PACKAGE) -> list[tuple[str, str]]:
    """(where, what names the event) for every event written under ``root``: ``Ev.X``,
    ``"literal"``, or ``<variable>`` for a name passed along (decide's verdicts)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        args = [_name_arg(n) for n in ast.walk(tree) if isinstance(n, ast.Call)]
        if path.name == "decide.py":
            args += _verdict_events(tree)
        for arg in filter(None, args):
            where = f"{path.relative_to(root.parent)}:{arg.lineno}"
            if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "Ev":
                found.append((where, f"Ev.{arg.attr}"))
            elif isinstance(arg, ast.Constant):
                found.append((where, repr(arg.value)))
            else:
                found.append((where, "<variable>"))
    return found


def test_every_event_written_is_registered_and_named_through_ev():
    found = written_names()
    assert len(found) > 50, len(found)  # the scan sees the writers (a pattern that matched nothing would pass)
    literal = [(w, n) for w, n in found if not n.startswith("Ev.") and n != "<variable>"]
    assert literal == [], "name events through eventlog.Ev"
    unknown = [(w, n) for w, n in found if n.startswith("Ev.") and not hasattr(Ev, n[3:])]
    assert unknown == []
    never = {k for k in vars(Ev) if k.isupper()} - {n[3:] for _, n in found if n.startswith("Ev.")}
    assert never == set(), "registered, but nothing writes it"
    # A name passed along: the two writers themselves (the supervisor's Record, the stop
    # contract's `_event`) and the supervisor's writing of decide's events (its verdicts, the
    # state machine's `event` actions), read above.
    passed = {w.split(":")[0] for w, n in found if n == "<variable>"}
    assert passed == {"slurmtrain/job/supervisor.py", "slurmtrain/job/record.py", "slurmtrain/stop/__init__.py"}, \
        passed


def test_every_registered_event_has_one_writer_class_and_a_value_of_its_own():
    names = {k: v for k, v in vars(Ev).items() if k.isupper()}
    assert len(set(names.values())) == len(names)
    assert set(names.values()) == set(eventlog.ALL_EVENTS)
    # `finished` is the script's and the program's (told apart by exit_code); no other is shared.
    shared = (eventlog.SCRIPT_EVENTS & eventlog.PROGRAM_EVENTS) | (eventlog.SCRIPT_EVENTS & eventlog.CLI_EVENTS) \
        | (eventlog.PROGRAM_EVENTS & eventlog.CLI_EVENTS)
    assert shared == {Ev.FINISHED}


def test_the_scan_finds_a_literal_name(tmp_path):
    pkg = tmp_path / "slurmtrain"
    pkg.mkdir()
    (pkg / "w.py").write_text("from . import events\n\ndef f(run):\n    events.append(run, 'nodes_gone', x=1)\n"
                              "    self.event(Ev.STARTED)\n")
    assert written_names(pkg) == [("slurmtrain/w.py:4", "'nodes_gone'"), ("slurmtrain/w.py:5", "Ev.STARTED")]


def _verdicts() -> list:
    """decide.after_launch over every combination of the facts that steer it."""
    from itertools import product

    from slurmtrain.job import decide
    out = []
    for status, finished, stop, requeued, down, cancelled, preempted, hung, saved, limit in product(
            (0, 1, 75), *[(False, True)] * 9):
        out.append(decide.after_launch(decide.Facts(
            status=status, stop_requested=stop, program_finished=finished, saved=saved, slurm_requeued=requeued,
            cancelled=cancelled, preempted=preempted, restarts=3 if limit else 0, max_requeues=3,
            requeue_always=False, hung=hung, down_nodes=("n1",) if down else ())))
    return out


def test_every_end_kind_has_one_state_one_exit_status_and_its_words():
    ends = set(eventlog.KINDS) - {eventlog.RUNNING, eventlog.UNKNOWN}
    assert set(eventlog.ENDINGS) == ends
    assert {e.state for e in eventlog.ENDINGS.values()} <= {"COMPLETED", "FAILED", "CANCELLED"}
    codes = {eventlog.EXIT_OK, eventlog.EXIT_FAILED, eventlog.EXIT_REQUEUE_LIMIT, eventlog.EXIT_START_UP, None}
    assert {e.exit_code for e in eventlog.ENDINGS.values()} <= codes
    assert len(set(eventlog.KINDS)) == len(eventlog.KINDS)  # the words `status` prints tell every kind apart
    # A failed end is never exit 0 to Slurm, a completed one never a failure status of ours.
    for kind, e in eventlog.ENDINGS.items():
        assert (e.state == "COMPLETED") == (e.exit_code in (eventlog.EXIT_OK, None) and kind in eventlog.STOP_KINDS
                                             | {eventlog.COMPLETED}), kind


def test_the_supervisors_verdicts_say_their_kind_and_agree_with_it():
    verdicts = _verdicts()
    kinds = {v.kind for v in verdicts}
    assert kinds <= set(eventlog.ENDINGS)
    assert kinds >= {eventlog.COMPLETED, eventlog.USER_ERROR, eventlog.HANG, eventlog.CANCELLED, eventlog.REQUEUED,
                     eventlog.NODE_FAILURE, eventlog.STOPPED_UNSAVED, eventlog.REQUEUE_LIMIT, eventlog.PREEMPTED,
                     eventlog.TIME_LIMIT}  # every verdict reached (WATCHDOG is the start-up watchdog's)
    for v in verdicts:
        fixed = eventlog.ENDINGS[v.kind].exit_code
        if v.action == "end" and fixed is not None:
            assert v.code == fixed, v
        if v.action == "requeue":
            assert v.kind in eventlog.STOP_KINDS, v
