"""The shape of the package, checked so it cannot drift back: no import cycle (typing-only and
in-function imports count), no class longer than 450 lines, a dozen modules at most at the
package root, the Delta layer free of pruning and expression code, protocol code free of the
engines, and statement kinds told apart by their classes, never by comparing their names."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "lakevilla"
MAX_CLASS_LINES = 450
MAX_ROOT_MODULES = 12
STATEMENT_KINDS = {"read", "insert", "update", "delete", "merge", "overwrite", "optimize",
                   "add_columns"}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    packages = {m for m, p in mods.items() if p.name == "__init__.py"}
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.ImportFrom):
                if n.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
                    target = ".".join(base + ([n.module] if n.module else []))
                else:
                    target = n.module or ""
                for cand in [target, *(f"{target}.{a.name}" for a in n.names)]:
                    if cand in mods and cand != m and cand not in packages:
                        edges[m].add(cand)
            elif isinstance(n, ast.Import):
                edges[m].update(a.name for a in n.names
                                if a.name in mods and a.name not in packages)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_counting_typing_and_in_function_imports():
    assert _cycles(_imports(_modules())) == []


def test_lower_layers_do_not_import_upper_ones():
    edges = _imports(_modules())
    forbidden = {
        "lakevilla.delta": ("lakevilla.scan", "lakevilla.statements", "lakevilla.engines",
                            "lakevilla.markers"),
        "lakevilla.store": ("lakevilla.delta", "lakevilla.scan", "lakevilla.engines"),
        "lakevilla.markers": ("lakevilla.statements", "lakevilla.core", "lakevilla.txn"),
        "lakevilla.statements": ("lakevilla.core", "lakevilla.txn", "lakevilla.recovery",
                                 "lakevilla.isolation"),
        "lakevilla.core": ("lakevilla.txn", "lakevilla.lake", "lakevilla.engines.embedded",
                           "lakevilla.engines.spark"),
        # what a statement asks of an engine is a value type of the engine API (a MERGE's plan
        # included): an engine that imported a statement would depend on its caller
        "lakevilla.engines": ("lakevilla.statements", "lakevilla.core", "lakevilla.txn",
                              "lakevilla.recovery", "lakevilla.complex_txn",
                              "lakevilla.isolation", "lakevilla.past", "lakevilla.lake"),
    }
    bad = [(m, t) for m, ts in edges.items() for low, highs in forbidden.items()
           if m.startswith(low + ".") for t in ts if t.startswith(highs)]
    assert bad == []


def test_protocol_code_never_imports_an_engine():
    edges = _imports(_modules())
    engines = ("lakevilla.engines.embedded", "lakevilla.engines.spark",
               "lakevilla.engines.pushdown")
    protocol = ("lakevilla.delta", "lakevilla.markers", "lakevilla.statements", "lakevilla.core",
                "lakevilla.recovery", "lakevilla.complex_txn", "lakevilla.isolation",
                "lakevilla.txn")
    assert [(m, t) for m, ts in edges.items() if m.startswith(protocol)
            for t in ts if t.startswith(engines)] == []


def test_no_class_is_longer_than_the_limit():
    long = [(str(p.relative_to(PKG)), n.name, n.end_lineno - n.lineno + 1)
            for p in PKG.rglob("*.py") for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.ClassDef) and n.end_lineno - n.lineno + 1 > MAX_CLASS_LINES]
    assert long == []


def test_few_modules_at_the_package_root():
    root = [p.name for p in PKG.glob("*.py") if p.name != "__init__.py"]
    assert len(root) <= MAX_ROOT_MODULES, sorted(root)


def _clause_kind(s: ast.AST, in_clause_class: bool) -> bool:
    """A MERGE clause's kind (``c.kind``, ``spec.clauses[i].kind``, ``self.kind`` in
    MergeClause)."""
    v = getattr(s, "value", None)
    return ((isinstance(v, ast.Name)
             and (v.id in ("c", "clause") or (v.id == "self" and in_clause_class)))
            or (isinstance(v, ast.Subscript) and isinstance(v.value, ast.Attribute)
                and v.value.attr == "clauses"))


def _kind_comparisons(path: Path) -> list[int]:
    """Lines comparing a statement's ``kind`` with a statement kind's name."""
    out = []
    tree = ast.parse(path.read_text())
    clause_lines = {ln for c in ast.walk(tree)
                    if isinstance(c, ast.ClassDef) and c.name == "MergeClause"
                    for ln in range(c.lineno, (c.end_lineno or c.lineno) + 1)}
    for n in ast.walk(tree):
        if not isinstance(n, ast.Compare):
            continue
        sides = [n.left, *n.comparators]
        names = {c.value for s in sides
                 for c in ([s] if isinstance(s, ast.Constant) else getattr(s, "elts", []))
                 if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        kind = any(isinstance(s, ast.Attribute) and s.attr == "kind"
                   and not _clause_kind(s, n.lineno in clause_lines)
                   for s in sides)
        if kind and names & STATEMENT_KINDS:
            out.append(n.lineno)
    return out


def test_statement_kinds_are_classes_not_names_compared():
    """Only the registry maps names to statement classes; a MERGE clause's kind (``c.kind``) is
    another thing."""
    found = {str(p.relative_to(PKG)): lines for p in PKG.rglob("*.py")
             if p.name != "registry.py" and (lines := _kind_comparisons(p))}
    assert found == {}
