"""The package's shape, checked: three programs, small modules, no import cycles.

* ``memfs.mount`` (the daemon) may import the shared modules, never the agent library or the
  operator tools; only its adapter (``fs``) and lifecycle (``daemon``) know pyfuse3, so the core
  runs without a kernel (tests/core).
* ``memfs.memory`` (runs inside the agent's process) imports nothing of the mount, the operator
  tools or the command line, nor the deprecated ``memfs.handler`` alias.
* Only the command line (``memfs.cli``) imports ``memfs.mount``; what two programs share lives in
  a neutral module (``memfs.locations``, ``memfs.usage``).
* Only ``memfs.s3`` imports boto3/botocore, and it imports none of the programs.
* No module is over 500 lines, and module-level imports form no cycle.
"""

from __future__ import annotations

import ast
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


def test_module_level_imports_have_no_cycle() -> None:
    graph = {m: internal(imports(m, top_level_only=True)) - {m} for m in MODULES}
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if n == m.rpartition(".")[0]:
                continue  # a module importing its own package's __init__ is not a cycle
            if state.get(n) == 1:
                cycle = [*stack[stack.index(n):], n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


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
