#!/usr/bin/env python3
"""rooms.py -- check that each room of the C tree uses only the rooms below it.

The C core lives in rooms (docs/architecture.md; shared/DESIGN.md's target tree):

    core <- cost <- search          core <- graph <- mem <- sim    (sim also uses cost)
    exec uses core, graph, mem               cpu, cuda and mpi use exec and everything below it
    py uses everything but mpi               csrc/shardwise.h (public), csrc/internal.h, csrc/ops.def: the top
    mpi's Python type (module.c) also uses py's generic communicator binding (py/comm_py.c)

The checker reads every .c and .h file under csrc/ and cuda/, maps
every non-static function defined in a .c file to its room, and then, for every file, finds

  * which functions of other rooms it names (a plain regex over identifiers, after stripping
    comments, strings and preprocessor lines; a function pointer stored in a table counts too),
  * which headers of other rooms it includes (quoted includes, resolved as the compiler does:
    the file's own folder, then -Icsrc -Icuda).

A use of a room that is not below the user's room fails, naming the file, the function or header,
and both rooms -- unless it is one of KNOWN_LEAKS below. A KNOWN_LEAKS entry that no longer
matches anything fails too, so that the list only shrinks. Circles (rooms that reach each other
through function calls, and files of one room that call each other both ways) are reported.

    python tools/rooms.py            # report; exit status 1 on an upward use or a stale leak
    python tools/rooms.py --root DIR # check another tree laid out the same way

Standard library only.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field

# Which rooms each room may use (besides itself and the top-level files "shardwise.h", "internal.h", "ops.def").
# exec runs the task graph in the order mem/ plans; it may not use sim/ (nothing needs it today).
BELOW_EXEC = {"core", "graph", "mem"}
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "cost": {"core"},
    "search": {"core", "cost"},
    "graph": {"core"},
    "mem": {"core", "graph"},
    # The simulator's compute durations are the cost model's roofline per worker
    # (sim_durations.c calls sw_worker_time, sw_worker_flops): sim uses cost, as DESIGN.md's data
    # flow draws (cost model -> ... -> simulator). Nothing in cost/ or search/ uses sim/.
    "sim": {"core", "cost", "graph", "mem"},
    "exec": set(BELOW_EXEC),
    "cpu": BELOW_EXEC | {"exec"},
    "cuda": BELOW_EXEC | {"exec"},
    # csrc/mpi/: shardwise._mpi, sw_comm_i (exec/comm.h) over MPI, its own shared object built only
    # where MPI is found. It implements exec's interface; no room uses it (the core never links MPI:
    # the runtime will take its table through a capsule, as it takes shardwise._cuda's backend).
    # Its Python type (module.c) is the generic binding of any sw_comm_i (py/comm_py.c, compiled
    # into shardwise._mpi too): mpi uses py; py never uses mpi.
    "mpi": BELOW_EXEC | {"exec", "py"},
    "py": {"core", "cost", "search", "graph", "mem", "sim", "exec", "cpu"},
}
ROOMS = list(ALLOWED)
TOP = "top"  # csrc/shardwise.h, csrc/internal.h, csrc/ops.def: usable by every room

# Known upward uses, one (file, room it uses, why) per entry; delete an entry when its leak is
# gone (an entry whose leak is gone and that is still listed fails the check).  Empty since the
# exec boundary was cleaned (sw_view/sw_window in core/view.h, the task environment and the
# optimizer description in exec/, the GPU host planning in exec/gpu/): keep it so.
KNOWN_LEAKS: list[tuple[str, str, str]] = [
]

INCLUDE_DIRS = ["csrc", "cuda"]
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else", "case", "goto",
            "_Alignof", "_Static_assert", "_Generic", "__attribute__", "defined"}


@dataclass
class Use:
    file: str      # the user, relative to the root
    room: str      # the user's room
    used: str      # the room used
    what: str      # a function name or a header path
    kind: str      # "call" or "include"


@dataclass
class Report:
    uses: list[Use] = field(default_factory=list)
    violations: list[Use] = field(default_factory=list)
    known: list[Use] = field(default_factory=list)
    stale: list[tuple[str, str, str]] = field(default_factory=list)
    room_cycles: list[list[str]] = field(default_factory=list)
    file_cycles: list[list[str]] = field(default_factory=list)
    ambiguous: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations and not self.stale


def room_of(rel: str) -> str | None:
    """The room of a path relative to the root, TOP for csrc/'s own files, None outside."""
    parts = rel.split("/")
    if parts[0] == "cuda":
        return "cuda"
    if parts[0] != "csrc":
        return None
    if len(parts) == 2:
        return TOP
    return parts[1] if parts[1] in ALLOWED else None


def in_cuda_object(rel: str) -> bool:
    """Is this file part of the _cuda extension (cuda/) rather than _core?"""
    return rel.startswith("cuda/")


_TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def strip(text: str) -> str:
    """Comments, strings and preprocessor lines (continuations included) blanked out."""
    def blank(m: re.Match) -> str:
        s = m.group(0)
        if s.startswith("/*") or s.startswith("//"):
            return "\n" * s.count("\n") + " "
        return '""'
    text = _TOKEN.sub(blank, text)
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", "", text, flags=re.M)


def definitions(code: str) -> list[tuple[str, bool]]:
    """(name, is_static) of each function defined at file scope in stripped code."""
    out = []
    depth = 0
    start = 0
    for i, ch in enumerate(code):
        if ch == "{":
            if depth == 0:
                head = code[start:i]
                if ")" in head and "=" not in head and not re.match(r"\s*(typedef|struct|enum|union)\b", head):
                    names = [n for n in re.findall(r"\b([A-Za-z_]\w*)\s*\(", head)
                             if n not in KEYWORDS and not n.isupper()]
                    if names:
                        out.append((names[0], bool(re.search(r"\bstatic\b", head))))
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                start = i + 1
        elif ch == ";" and depth == 0:
            start = i + 1
    return out


def resolve(root: str, rel: str, name: str) -> str | None:
    """Where a quoted #include of `name` in file `rel` lands (relative to root), if in the tree."""
    for d in [os.path.dirname(rel)] + INCLUDE_DIRS:
        p = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(os.path.join(root, p)):
            return p.replace(os.sep, "/")
    return None


def sources(root: str) -> list[str]:
    out = []
    for top in ("csrc", "cuda"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/"))
    return sorted(out)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    nodes = sorted(set(edges) | {v for vs in edges.values() for v in vs})

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(out)


def check(root: str, known: list[tuple[str, str, str]] | None = None) -> Report:
    known = KNOWN_LEAKS if known is None else known
    files = [f for f in sources(root) if room_of(f) is not None]
    text = {f: open(os.path.join(root, f), encoding="utf-8", errors="replace").read() for f in files}
    code = {f: strip(t) for f, t in text.items()}

    # Every non-static function defined in a .c file: name -> files defining it. (cuda/ is a
    # second shared object, so a name may be defined twice; a use resolves to its own room first.)
    defined: dict[str, list[str]] = defaultdict(list)
    for f in files:
        if f.endswith(".c"):
            for name, static in definitions(code[f]):
                if not static:
                    defined[name].append(f)
    rep = Report()
    rep.ambiguous = {n: fs for n, fs in defined.items() if len({room_of(x) for x in fs}) > 1}

    ident = re.compile(r"\b[A-Za-z_]\w*\b")
    file_edges: dict[str, set[str]] = defaultdict(set)
    for f in files:
        room = room_of(f)
        seen = set()
        for name in sorted(set(ident.findall(code[f])) & defined.keys()):
            # cuda/*.c is a second shared object (with csrc/exec/gpu/, csrc/exec/task_env.c,
            # csrc/graph/task_kinds.c, csrc/core/view.c and csrc/core/ops.c compiled in again): a name it defines again
            # (cuda/core_link.c) resolves inside the object that uses it.
            owners = [o for o in defined[name] if in_cuda_object(o) == in_cuda_object(f)] or defined[name]
            if f in owners:
                continue
            rooms = {room_of(o) for o in owners}
            if room in rooms:  # its own room's (or, for cuda, its own object's) function
                for o in owners:
                    if room_of(o) == room:
                        file_edges[f].add(o)
                continue
            for o in owners:
                seen.add((room_of(o), name, "call"))
        for m in re.finditer(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', text[f], re.M):
            target = resolve(root, f, m.group(1))
            if target is None:
                continue
            troom = room_of(target)
            if troom not in (None, TOP, room):
                seen.add((troom, target, "include"))
        for used, what, kind in sorted(seen, key=str):
            rep.uses.append(Use(f, room, used, what, kind))

    known_hit = set()
    for u in rep.uses:
        if u.used in ALLOWED.get(u.room, set()) or u.room == TOP:
            continue
        leak = next((k for k in known if k[0] == u.file and k[1] == u.used), None)
        if leak is not None:
            known_hit.add(leak)
            rep.known.append(u)
        else:
            rep.violations.append(u)
    rep.stale = [k for k in known if k not in known_hit]

    room_edges: dict[str, set[str]] = defaultdict(set)
    for u in rep.uses:
        if u.kind == "call" and u.room != TOP:
            room_edges[u.room].add(u.used)
    rep.room_cycles = cycles(room_edges)
    # Files of one room that reach each other (a .c file "calls" another when it names a function
    # the other defines). Inside a room a circle is allowed, but worth seeing.
    rep.file_cycles = cycles({f: {g for g in gs if g.endswith(".c")} for f, gs in file_edges.items()})
    return rep


def render(rep: Report, verbose: bool = False) -> str:
    lines = ["rooms graph (function calls and includes; * = not allowed):"]
    graph: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for u in rep.uses:
        graph[u.room][u.used] += 1
    for room in ROOMS:
        used = graph.get(room, {})
        parts = [f"{r}{'' if r in ALLOWED[room] else '*'} ({n})" for r, n in sorted(used.items())]
        lines.append(f"  {room:6s} -> {', '.join(parts) if parts else '(nothing)'}")
    if rep.room_cycles:
        lines.append("circles between rooms (function calls):")
        lines += [f"  {' <-> '.join(c)}" for c in rep.room_cycles]
    else:
        lines.append("circles between rooms: none")
    if rep.file_cycles:
        lines.append("circles between files of one room (allowed; a split of one concept):")
        lines += [f"  {' <-> '.join(c)}" for c in rep.file_cycles]
    if rep.known:
        lines.append(f"known leaks (KNOWN_LEAKS, {len({(u.file, u.used) for u in rep.known})} entries in use):")
        for u in rep.known:
            lines.append(f"  {u.file} ({u.room}) uses {u.used}: {u.kind} {u.what}")
    if verbose and rep.ambiguous:
        lines.append("functions defined in more than one room (separate shared objects):")
        lines += [f"  {n}: {', '.join(fs)}" for n, fs in sorted(rep.ambiguous.items())]
    for u in rep.violations:
        lines.append(f"ERROR {u.file}: room {u.room} uses room {u.used} ({u.kind} {u.what}), "
                     f"which is not below it")
    for f, r, why in rep.stale:
        lines.append(f"ERROR KNOWN_LEAKS lists {f} -> {r} ({why}), which no longer happens: delete the entry")
    lines.append("OK" if rep.ok else f"FAILED: {len(rep.violations)} upward uses, {len(rep.stale)} stale leaks")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the repository root (default: this checkout)")
    ap.add_argument("-v", "--verbose", action="store_true", help="also list names defined in two rooms")
    args = ap.parse_args(argv)
    rep = check(args.root)
    print(render(rep, args.verbose))
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
