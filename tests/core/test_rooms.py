"""tools/rooms.py: every room of csrc/ (and cuda/) uses only the rooms below it.

Runs the checker on this checkout, and on small made-up trees to check the checker itself.
"""
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "rooms.py")


def _rooms():
    spec = importlib.util.spec_from_file_location("rooms_tool", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["rooms_tool"] = mod   # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def _tree(tmp_path, files):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(tmp_path)


def test_this_tree_keeps_its_rooms():
    r = subprocess.run([sys.executable, TOOL], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("OK")
    assert "circles between rooms: none" in r.stdout or "cpu <-> cuda <-> exec" in r.stdout


def test_upward_call_is_caught(tmp_path):
    rooms = _rooms()
    root = _tree(tmp_path, {
        "csrc/shardwise.h": "int sw_low(void);\nint sw_high(void);\n",
        # core calls up into cost: not allowed
        "csrc/core/low.c": '#include "shardwise.h"\n/* sw_high() in a comment is no call */\n'
                           'int sw_low(void) { return sw_high() + 1; }\n',
        "csrc/cost/high.c": '#include "shardwise.h"\nstatic int helper(void) { return 2; }\n'
                            'int sw_high(void) { return helper(); }\n',
    })
    rep = rooms.check(root, known=[])
    assert not rep.ok
    assert [(u.file, u.room, u.used, u.what) for u in rep.violations] == [
        ("csrc/core/low.c", "core", "cost", "sw_high")]
    text = rooms.render(rep)
    assert "csrc/core/low.c: room core uses room cost (call sw_high)" in text
    # the downward direction alone is fine, and a circle between rooms is reported
    rep2 = rooms.check(_tree(tmp_path, {"csrc/core/low.c": "int sw_low(void) { return 1; }\n"}), known=[])
    assert rep2.ok and rep2.room_cycles == []
    rep3 = rooms.check(_tree(tmp_path, {"csrc/core/low.c": "int sw_low(void) { return sw_high(); }\n",
                                        "csrc/cost/high.c": "int sw_high(void) { return sw_low(); }\n"}),
                       known=[])
    assert rep3.room_cycles == [["core", "cost"]]
    assert "core <-> cost" in rooms.render(rep3)


def test_upward_include_and_known_leaks(tmp_path):
    rooms = _rooms()
    root = _tree(tmp_path, {
        "csrc/shardwise.h": "",
        "csrc/cpu/kernels.h": "",
        "csrc/exec/runtime.h": '#include "../cpu/kernels.h"\n',
    })
    rep = rooms.check(root, known=[])
    assert [(u.file, u.used, u.kind) for u in rep.violations] == [("csrc/exec/runtime.h", "cpu", "include")]
    leak = ("csrc/exec/runtime.h", "cpu", "a known leak")
    rep = rooms.check(root, known=[leak])
    assert rep.ok and rep.known
    # a listed leak that no longer happens fails, so the list only shrinks
    stale = ("csrc/exec/executor.c", "cpu", "gone")
    rep = rooms.check(root, known=[leak, stale])
    assert not rep.ok and rep.stale == [stale]
    assert "delete the entry" in rooms.render(rep)


def test_mpi_room_implements_exec_and_nothing_uses_it(tmp_path):
    """csrc/mpi/ (shardwise._mpi) may use exec/'s comm.h and the rooms below (and py/'s generic
    communicator binding); no room may use mpi/:
    the core never links MPI."""
    rooms = _rooms()
    # exec's interface and what is below it; py for the generic Python binding of a communicator
    # (py/comm_py.c, which shardwise._mpi compiles a copy of)
    assert rooms.ALLOWED["mpi"] == {"core", "graph", "mem", "exec", "py"}
    assert all("mpi" not in allowed for room, allowed in rooms.ALLOWED.items() if room != "mpi")
    root = _tree(tmp_path, {
        "csrc/shardwise.h": "int sw_set_error(int s);\n",
        "csrc/core/status.c": '#include "shardwise.h"\nint sw_set_error(int s) { return s; }\n',
        "csrc/exec/comm.h": "typedef struct sw_comm sw_comm;\n",
        "csrc/mpi/comm_mpi.h": '#include "../exec/comm.h"\nint sw_comm_mpi_new(void);\n',
        "csrc/mpi/comm_mpi.c": '#include "comm_mpi.h"\nint sw_comm_mpi_new(void) { return sw_set_error(1); }\n',
    })
    rep = rooms.check(root, known=[])
    assert rep.ok, rooms.render(rep)
    assert {(u.room, u.used) for u in rep.uses if u.room == "mpi"} == {("mpi", "exec"), ("mpi", "core")}
    assert "mpi    -> core (1), exec (1)" in rooms.render(rep)
    # the core's runtime calling into mpi/, or py/ including its header: both refused
    root = _tree(tmp_path, {
        "csrc/exec/executor.c": "int run(void) { return sw_comm_mpi_new(); }\n",
        "csrc/py/module.c": '#include "../mpi/comm_mpi.h"\n',
    })
    rep = rooms.check(root, known=[])
    assert sorted((u.file, u.used, u.kind) for u in rep.violations) == [
        ("csrc/exec/executor.c", "mpi", "call"), ("csrc/py/module.c", "mpi", "include")]


def test_this_tree_has_the_mpi_room():
    r = subprocess.run([sys.executable, TOOL], capture_output=True, text=True)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("  mpi    -> ")), "")
    assert "exec" in line and "py" in line and "mpi*" not in r.stdout, r.stdout
