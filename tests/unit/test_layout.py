"""The package's shape, checked: three programs, small modules, no import cycles.

* ``memfs.mount`` (the daemon) may import the shared modules, never the agent library or the
  operator tools; only its adapter (``fs``) and lifecycle (``daemon``) know pyfuse3, so the core
  runs without a kernel (tests/core).
* ``memfs.memory`` (runs inside the agent's process) imports nothing of the mount, the operator
  tools or the command line, nor the deprecated ``memfs.handler`` alias.
* Only the command line (``memfs.cli``) imports ``memfs.mount``; what two programs share lives in
  a neutral module (``memfs.locations``, ``memfs.usage``).
* Only ``memfs.s3`` imports boto3/botocore, and it imports none of the programs.
* No module is over 500 lines, and imports form no cycle: at module level or inside a function
  (only ``if TYPE_CHECKING:`` blocks are left out, since they never run).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import memfs

PACKAGE = Path(memfs.__file__).parent
MODULES = {
    ".".join(("memfs", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__"):
    p for p in PACKAGE.rglob("*.py")
}
MAX_LINES = 500
FUSE_AWARE = {"memfs.mount.fs", "memfs.mount.daemon"}


def imports(module: str, *, top_level_only: bool) -> set[str]:
    """Names `module` imports (absolute, resolved), at module level only if asked."""
    tree = ast.parse(MODULES[module].read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.If):  # `if TYPE_CHECKING:` blocks do not run
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:  # relative: from the module's package, up level - 1 more
                package = module if MODULES[module].name == "__init__.py" else (
                    module.rpartition(".")[0])
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], node.module])
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)
    return out


def under(names: set[str], *packages: str) -> set[str]:
    """The names that are one of `packages` or inside one."""
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in packages)}


def internal(names: set[str]) -> set[str]:
    return {n for n in names if n in MODULES}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_is_small(module: str) -> None:
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines; carve it (limit {MAX_LINES})"


@dataclass(frozen=True)
class Edge:
    """One runtime import: `source` imports `target` at `line` (inside `function`, or at import
    time when it is None)."""

    source: str
    target: str
    line: int
    function: str | None

    def __str__(self) -> str:
        where = f"{MODULES[self.source].relative_to(PACKAGE.parent)}:{self.line}"
        return f"{where}" + (f", inside {self.function}()" if self.function else "")


def _type_checking(test: ast.expr) -> bool:
    """`TYPE_CHECKING` or `typing.TYPE_CHECKING`: a block that never runs."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _owner(name: str) -> str | None:
    """The memfs module `name` is, or the innermost one it lies in (None: not memfs's)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _packages_of(module: str) -> set[str]:
    """The packages whose ``__init__`` has started when `module` runs: its own (if it is one)
    and every one above it."""
    parts = module.split(".")
    own = len(parts) if MODULES[module].name == "__init__.py" else len(parts) - 1
    return {".".join(parts[:i]) for i in range(1, own + 1)}


def runtime_imports(module: str, source: str | None = None) -> list[Edge]:
    """Every memfs module `module` imports when it runs: at module level, in class bodies and
    inside functions (an import there runs at the first call: a cycle all the same), except under
    `if TYPE_CHECKING:` at any depth. A name taken from a package is an edge to the submodule
    when it is one, else to the package; importing `a.b.c` imports the packages `a.b` and `a`
    first, which count too unless `module` is inside them already (their ``__init__`` runs)."""
    started = _packages_of(module)
    edges: list[Edge] = []

    def add(target: str | None, node: ast.stmt, function: str | None, implicit: bool) -> None:
        if target is None or target == module or (implicit and target in started):
            return
        edges.append(Edge(module, target, node.lineno, function))
        parent = target.rpartition(".")[0]
        if parent:
            add(_owner(parent), node, function, implicit=True)

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:  # (the else branch does run)
                visit(child, function)
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name if function is None else f"{function}.{node.name}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_owner(alias.name), node, function, implicit=False)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1 more
                package = sorted(_packages_of(module), key=len)[-1].split(".")
                base = ".".join([*package[: len(package) - node.level + 1], *filter(None, [base])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in MODULES else _owner(base), node, function, implicit=False)
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(MODULES[module].read_text() if source is None else source), None)
    return edges


def import_cycles(graph: dict[str, list[Edge]]) -> list[tuple[set[str], list[Edge]]]:
    """Each group of modules that import one another (a strongly connected component, by
    Tarjan's algorithm), with one shortest cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def connect(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for e in graph[m]:
            if e.target not in index:
                connect(e.target)
                low[m] = min(low[m], low[e.target])
            elif e.target in stack:
                low[m] = min(low[m], index[e.target])
        if low[m] == index[m]:
            group: set[str] = set()
            while True:
                n = stack.pop()
                group.add(n)
                if n == m:
                    break
            if len(group) > 1:
                groups.append(group)

    for m in sorted(graph):
        if m not in index:
            connect(m)
    cycles = []
    for group in groups:
        start = min(group)
        paths: dict[str, list[Edge]] = {start: []}  # breadth first: the shortest way back
        frontier, back = [start], None
        while frontier and back is None:
            following = []
            for m in frontier:
                for e in sorted(graph[m], key=lambda e: e.target):
                    if e.target == start and back is None:
                        back = [*paths[m], e]
                    elif e.target in group and e.target not in paths:
                        paths[e.target] = [*paths[m], e]
                        following.append(e.target)
            frontier = following
        assert back is not None
        cycles.append((group, back))
    return cycles


def describe(group: set[str], cycle: list[Edge]) -> str:
    return "\n".join([f"  {cycle[0].source}", *(f"  -> {e.target}    ({e})" for e in cycle),
                      f"  (the modules in this circle: {', '.join(sorted(group))})"])


def test_runtime_imports_have_no_cycle() -> None:
    """Issue #48: imports run downward, also those inside functions (which only hide a cycle:
    the first call closes it). The command line's lazy imports are fine; a cycle is not."""
    graph = {m: runtime_imports(m) for m in MODULES}
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (module, then what it imports and where):\n" + (
        "\n\n".join(describe(*c) for c in cycles))


def test_the_cycle_check_sees_inside_functions_but_not_type_checking() -> None:
    """The check itself: an import inside a function (however deep) counts, one under
    ``if TYPE_CHECKING:`` (whose ``else`` runs) does not, and a cycle is reported as a path."""
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from memfs.memory import commands\n"
              "else:\n    import memfs.protocol\n"
              "def f():\n    if True:\n        from memfs.memory import edits, CommandError\n")
    edges = runtime_imports("memfs.memory.errors", source)
    assert sorted((e.target, e.function) for e in edges) == [
        ("memfs.memory", "f"), ("memfs.memory.edits", "f"), ("memfs.protocol", None)]
    a = runtime_imports("memfs.memory.errors", "def f():\n    from memfs.memory import paths\n")
    b = runtime_imports("memfs.memory.paths", "from memfs.memory.errors import CommandError\n")
    cycles = import_cycles({"memfs.memory.errors": a, "memfs.memory.paths": b})
    assert [[(e.source, e.target) for e in cycle] for _, cycle in cycles] == [
        [("memfs.memory.errors", "memfs.memory.paths"),
         ("memfs.memory.paths", "memfs.memory.errors")]]
    assert "memfs/memory/errors.py:2, inside f()" in describe(*cycles[0])


#: The memory package's top: what may import the dispatcher (``memfs.memory.commands``).
MEMORY_FRONT_ENDS = {"memfs.memory", "memfs.memory.jsonl", "memfs.memory.sdk",
                     "memfs.memory.async_tool", "memfs.memory.mcp_server"}


def test_the_memory_package_stands_in_layers() -> None:
    """Issue #48, docs/HANDLER.md "How the package stands": the contract at the bottom imports
    nothing of memfs; the input checks only the contract and the error type; no implementation
    imports the dispatcher, not even for a type (they work on a ``Workspace``)."""
    memory = {m for m in MODULES if m.startswith("memfs.memory.")}
    assert internal(imports("memfs.memory.command_table", top_level_only=False)) == set()
    assert internal(imports("memfs.memory.schema", top_level_only=False)) <= {
        "memfs.memory", "memfs.memory.command_table", "memfs.memory.errors"}
    below = sorted(m for m in memory - MEMORY_FRONT_ENDS - {"memfs.memory.commands"}
                   if "memfs.memory.commands" in imports(m, top_level_only=False))
    assert below == [], f"{below} import the dispatcher (memfs.memory.commands)"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("memfs.mount")))
def test_the_mount_knows_fuse_only_in_its_adapter(module: str) -> None:
    names = imports(module, top_level_only=False)
    if module not in FUSE_AWARE and module != "memfs.mount":
        assert "pyfuse3" not in names, f"{module} imports pyfuse3; only the adapter may"
    assert not under(names, "memfs.memory", "memfs.ops", "memfs.cli")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("memfs.memory")))
def test_the_agent_library_stands_alone(module: str) -> None:
    names = imports(module, top_level_only=False)
    assert not under(names, "memfs.mount", "memfs.ops", "memfs.cli")
    assert "pyfuse3" not in names
    # Its public names live in memfs.memory; memfs.handler is the deprecated alias of them,
    # never a way in for the package itself.
    assert not under(names, "memfs.handler"), f"{module} imports the deprecated alias"


#: Only the command line starts the daemon, so only it (and the mount itself) may import the
#: mount; helpers two programs share live in a neutral module (memfs.locations, memfs.usage).
MAY_IMPORT_THE_MOUNT = ("memfs.mount", "memfs.cli")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not under(
    {m}, *MAY_IMPORT_THE_MOUNT)))
def test_only_the_command_line_imports_the_mount(module: str) -> None:
    names = imports(module, top_level_only=False)
    assert not under(names, "memfs.mount"), f"{module} imports {under(names, 'memfs.mount')}"


#: Every request memfs sends is in ``memfs.s3``: nothing else imports boto3 or botocore.
S3_PACKAGE = "memfs.s3"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith(S3_PACKAGE)))
def test_only_the_s3_package_imports_boto3(module: str) -> None:
    names = imports(module, top_level_only=False)
    assert not under(names, "boto3", "botocore"), f"{module} talks to S3 itself"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(S3_PACKAGE)))
def test_the_s3_package_stands_on_nothing_above_it(module: str) -> None:
    """The S3 layer is the floor the programs stand on: it imports none of them."""
    names = imports(module, top_level_only=False)
    assert not under(names, "memfs.mount", "memfs.memory", "memfs.ops", "memfs.cli",
                     "memfs.demo", "memfs.handler")


def test_the_core_has_no_mixin_chain() -> None:
    """Issue #32: the core is one state and parts it holds. Only ``MemFSCore`` is a
    ``CoreState``; the parts start from ``Part`` and none is built on another part (a part that
    needs another is given it)."""
    bases: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        if not module.startswith("memfs.mount."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
    states = sorted(name for name, of in bases.items() if "CoreState" in of)
    assert states == ["MemFSCore"], states
    parts = {name for name, of in bases.items() if of == ["Part"]}
    assert {"ListingCache", "Namespace", "DataPath", "Loader", "Uploader", "Renames"} <= parts
    built_on_parts = {name: of for name, of in bases.items() if set(of) & parts}
    assert built_on_parts == {}, built_on_parts
