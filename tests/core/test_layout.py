"""The Python package's layout rules that can be read off the source.

* reference/ is the NumPy oracle for tests: no production module imports shardwise.reference,
  at the top of a file or inside a function (issue 24, point 2).
* No Python twin of C logic: the interval arithmetic of index expressions lives in
  csrc/core/region.c only (issue 24, point 6); ops/boxes.py, its Python copy, is gone.
"""
from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "python" / "shardwise"


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE), ast.parse(path.read_text(), filename=str(path))


def _imported(tree: ast.AST, path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, wherever it sits; relative imports resolved."""
    package = ["shardwise", *path.parent.parts]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((node.lineno, module))
            out += [(node.lineno, f"{module}.{a.name}") for a in node.names]   # from shardwise import reference
    return out


def test_the_scan_sees_every_module():
    names = {str(p) for p, _ in _modules()}
    assert "reference/__init__.py" in names and "importers/onnx/ops.py" in names and len(names) > 50


def test_no_production_module_imports_the_numpy_oracle():
    offenders = []
    for path, tree in _modules():
        if path.parts[0] == "reference":
            continue
        for line, module in _imported(tree, path):
            if module == "shardwise.reference" or module.startswith("shardwise.reference."):
                offenders.append(f"{path}:{line} imports {module}")
    assert not offenders, "production code must not import the NumPy oracle:\n" + "\n".join(offenders)


def test_the_scan_catches_imports_inside_functions():
    tree = ast.parse("def f():\n    from shardwise.reference import conv2d_forward\n"
                     "def g():\n    from .. import reference\n")
    found = [m for _, m in _imported(tree, pathlib.Path("importers/x.py"))]
    assert "shardwise.reference" in found
    assert "shardwise.reference.conv2d_forward" in found


def test_no_python_copy_of_the_region_arithmetic():
    assert not (PACKAGE / "ops" / "boxes.py").exists()
    for path, tree in _modules():
        names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert not names & {"expr_interval", "_compiled"}, path
