"""The source tree's shape: no module imports back into a module that imports it (files as nodes,
type-only imports included), and no source file over 1,000 lines (generated code aside)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("offload", "ir", "frontends", "passes", "emit", "partitioner", "delegates", "runtime", "schemas")
MAX_LINES = 1000


def _sources() -> dict[str, Path]:
    """Module name (as installed, offload.<stage>...) → file, generated code left out."""
    found = {}
    for stage in STAGES:
        for path in (ROOT / stage).rglob("*.py"):
            rel = path.relative_to(ROOT)
            if "generated" in rel.parts or "__pycache__" in rel.parts:
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts[0] == "offload":
                parts.pop(0)
            found[".".join(["offload", *parts])] = path
    return found


def _module_level_imports(tree: ast.Module):
    """Import statements run when the module loads, ``if TYPE_CHECKING:`` blocks included (a
    function body's imports run later, by design, and are left out)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            stack.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)


def _graph() -> dict[str, set[str]]:
    files = _sources()
    edges: dict[str, set[str]] = {m: set() for m in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _module_level_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in files]
                # `from pkg import submodule` depends on the submodule; `from pkg import name` on pkg
                targets = subs if len(subs) == len(node.names) else [module, *subs]
            edges[name].update(t for t in targets if t in files and t != name)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_back_into_one_that_imports_it():
    edges = _graph()
    assert len(edges) > 200 and "offload.runtime.module" in edges["offload.runtime"]
    assert _cycles(edges) == []


def test_the_cycle_finder_finds_a_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]


def test_no_source_file_is_over_a_thousand_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path in _sources().values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
