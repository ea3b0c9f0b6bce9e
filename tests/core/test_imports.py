"""The Python package has no import cycle: every module's imports of other shardwise modules, at
the top or inside functions (not those under ``if TYPE_CHECKING:``), form a graph without a
circle, except for the few facade methods listed in FACADES.

A facade is a method of a plain data class that hands the instance to a module above it (a
plan's ``compare``, a device graph's ``save``): the module above imports the class, and the
method imports that module when called.  Only such methods belong in it, and an entry whose
import is gone fails the test too.
"""
from __future__ import annotations

import ast
import pathlib
import sys
from collections import defaultdict

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "shardwise"
sys.path.insert(0, str(ROOT / "tools"))
from rooms import cycles as graph_cycles  # noqa: E402  (Tarjan's components, shared with the C rooms check)

# (module, module it imports inside a method) -> why
FACADES = {
    ("shardwise.plan", "shardwise.plan_compare"): "Plan.compare simulates the plan beside the baselines",
    ("shardwise.plan", "shardwise.plan_explain"): "Plan.explain costs the op's other configurations",
    ("shardwise.plan", "shardwise.iteration.memory"): "Plan.memory plans the plan's memory per device",
    ("shardwise.machine.devices", "shardwise.machine.machine_file"): "DeviceGraph.save / load / to_dict / from_dict",
    ("shardwise.machine.devices", "shardwise.machine.cuda"): "DeviceGraph.local_gpus asks the CUDA backend",
}


def module_names(root: pathlib.Path) -> dict[str, pathlib.Path | None]:
    """Dotted name -> file of every module of the package (the C extensions as None)."""
    mods: dict[str, pathlib.Path | None] = {"shardwise._core": None, "shardwise._cuda": None, "shardwise._mpi": None}
    for path in root.rglob("*.py"):
        name = ".".join(("shardwise",) + path.relative_to(root).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def import_edges(root: pathlib.Path) -> dict[tuple[str, str], int]:
    """(importer, imported) -> line of the first import executed at run time."""
    mods = module_names(root)

    def resolve(name: str) -> str:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    edges: dict[tuple[str, str], int] = {}
    for name, path in mods.items():
        if path is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(n) for node in ast.walk(tree)
                       if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                       for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("shardwise"):
                targets = [resolve(f"{node.module}.{a.name}") for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                raise AssertionError(f"{path}:{node.lineno}: relative import; the package imports absolutely")
            elif isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names if a.name.startswith("shardwise")]
            else:
                continue
            for target in targets:
                if target != name:
                    edges.setdefault((name, target), node.lineno)
    return edges


def cycles(edges) -> list[list[str]]:
    """The import cycles among ``edges`` ((importer, imported) pairs): components of more than one module."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    return graph_cycles(graph)


def test_no_import_cycle():
    edges = import_edges(PACKAGE)
    rest = {e: line for e, line in edges.items() if e not in FACADES}
    found = cycles(rest)
    lines = [f"{a} -> {b} (line {rest[(a, b)]})" for c in found for a in c for b in c if (a, b) in rest]
    assert not found, "import cycles:\n" + "\n".join(lines)


def test_every_facade_is_still_there():
    edges = import_edges(PACKAGE)
    gone = [f"{a} -> {b}" for a, b in FACADES if (a, b) not in edges]
    assert not gone, f"FACADES lists imports that are gone (delete them from the list): {gone}"


def test_the_check_finds_a_cycle(tmp_path):
    """The checker itself: a cycle closed by an import inside a function is found, one under
    TYPE_CHECKING is not."""
    root = tmp_path / "shardwise"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    (root / "a.py").write_text("from shardwise.sub.b import g\n")
    (root / "sub" / "b.py").write_text("def g():\n    from shardwise import a\n")
    (root / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from shardwise.d import x\n")
    (root / "d.py").write_text("import shardwise.c\n")
    assert cycles(import_edges(root)) == [["shardwise.a", "shardwise.sub.b"]]
    (root / "e.py").write_text("from . import a\n")
    with pytest.raises(AssertionError, match="relative import"):
        import_edges(root)
