"""Architecture rules of the clpatch package, checked on its source with :mod:`ast`.

Nothing of clpatch is imported: :func:`import_graph` parses every ``.py`` file under the
package folder and records each ``import`` / ``from … import`` of a clpatch module. The rules:

(a) no import cycle between clpatch modules, counting module-level imports (code run when
    the module is imported, class bodies and ``try`` blocks included). Imports under
    ``if TYPE_CHECKING:`` count too: they are not run, but they are still a design cycle
    (two modules that each need the other), which is what the rule is about. Imports inside
    functions do not make cycle edges; rule (c) forbids those instead.
(b) no module uses a private (``_name``) name of another clpatch module: ``from .x import _y``,
    ``from clpatch.x import _y``, an import of a private module (``import clpatch._m``,
    ``from . import _m``, ``from ._m import y``: an underscore module is a private name of its
    package), or an attribute ``m._y`` on a name bound by an import of a clpatch module.
    Dunder names (``__version__``) are public.
(c) no import of a clpatch module inside a function, except the entries of
    :data:`LOCAL_IMPORTS_ALLOWED` (each with its reason). Third-party imports inside functions
    (optional dependencies: imageio, tifffile, platformdirs, …) are fine.
(d) layering (:data:`LAYERS`): ``core`` imports nothing above it; ``match`` only core and
    match; ``denoise`` core, match, denoise; ``tune`` core, match, denoise, tune; ``io`` core
    and io; ``selftest`` core, match, denoise, selftest; ``dask`` core, match, denoise, dask;
    ``cli`` anything. Layered modules may import the top-level leaf ``clpatch.version``
    but not the package root. The top-level modules of :data:`TOP_LEVEL` are unconstrained
    (except for cycles); any other module outside a known subpackage is reported.
(e) no module longer than :data:`MAX_LINES` lines (the guideline is "about 400").
(f) every class named ``…Plan`` derives, directly or through other classes of the package,
    from the plan base ``Plan`` of ``clpatch.core.plans`` (its pool, uploader, events and
    the ``enqueue`` contract of ``clpatch.make_plan``). Bases are resolved by class name
    within the package.

How an import names its target: ``import clpatch.a.b`` imports ``clpatch.a.b``; ``from X
import n`` imports the submodule ``X.n`` when that is a module of the package (``from . import
x``, ``from .pkg import mod``), else it takes the name ``n`` from ``X``; a package ``clpatch.foo``
stands for ``clpatch/foo/__init__.py``. The parent packages Python initialises on the way are
not counted as edges (they are already being imported whenever a submodule runs).

The tests on the real package list every offender in their failure message; the ``test_checker_*``
tests run the same helpers on small synthetic packages so that the checker cannot silently pass.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "clpatch"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE

#: Longest module allowed (rule e).
MAX_LINES = 450

#: Subpackage -> the subpackages its modules may import (None: anything). Rule (d).
LAYERS: dict[str, frozenset[str] | None] = {
    "core": frozenset({"core"}),
    "match": frozenset({"core", "match"}),
    "denoise": frozenset({"core", "match", "denoise"}),
    "tune": frozenset({"core", "match", "denoise", "tune"}),
    "io": frozenset({"core", "io"}),
    "selftest": frozenset({"core", "match", "denoise", "selftest"}),
    "dask": frozenset({"core", "match", "denoise", "dask"}),
    "cli": None,
    # Drop-in signatures of other libraries: they import only the package root's public
    # names, as a user would (tests/compat/test_compat_imports.py checks it).
    "compat": None,
    # VapourSynth filters (optional extra): like compat, they use only the package root's
    # public names (tests/vapoursynth/test_vs_imports.py checks it).
    "vapoursynth": None,
    "data": frozenset({"data"}),        # package data (camera.png); no code
}

#: Top-level modules that are no layer and may import anything (rule d; cycles still count).
TOP_LEVEL = frozenset({PACKAGE, f"{PACKAGE}.__main__", f"{PACKAGE}.version", f"{PACKAGE}.dask",
                       f"{PACKAGE}.pipeline", f"{PACKAGE}.engines"})

#: Top-level leaves every layer may import.
SHARED_LEAVES = frozenset({f"{PACKAGE}.version"})

#: (importing module, imported module) -> why that import sits inside a function. Rule (c).
#: An entry that matches no import any more fails the test (keep the list honest).
LOCAL_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    # e.g. ("clpatch.cli.main", "clpatch.cli.video"): "the video sub-command needs the optional
    #      imageio stack; `clpatch denoise image.png` must work without it",
    ("clpatch.cli.chunked", "clpatch.dask"): "clpatch.dask needs the optional dask extra; "
    "`clpatch denoise` without --chunks must work without it",
}


# =========================================================================== the checker


@dataclass(frozen=True)
class Import:
    """One clpatch module imported by one statement (a statement naming several modules gives
    several records)."""

    importer: str           # the module holding the statement
    target: str             # the clpatch module imported (a package: its __init__.py)
    name: str | None        # the name taken from target (``from target import name``), else None
    file: str               # path of the importer, relative to the package's parent folder
    line: int
    in_function: bool       # inside a def (at any depth)
    type_checking: bool     # under ``if TYPE_CHECKING:``
    statement: str          # the statement's source

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class AttributeUse:
    """``name.attr`` where ``name`` is bound by an import of the clpatch module ``target``."""

    importer: str
    target: str
    file: str
    line: int
    expr: str


@dataclass
class ImportGraph:
    package: str
    package_dir: Path
    modules: dict[str, Path]                 # module name -> file
    imports: list[Import]
    attributes: list[AttributeUse]

    def edges(self) -> dict[str, set[str]]:
        """Module-level import edges between modules of the package (TYPE_CHECKING included)."""
        out: dict[str, set[str]] = {m: set() for m in self.modules}
        for imp in self.imports:
            if not imp.in_function and imp.target in self.modules and imp.target != imp.importer:
                out[imp.importer].add(imp.target)
        return out

    def subpackage_of(self, module: str) -> str | None:
        """The first-level subpackage holding ``module`` (``clpatch.core.x`` -> ``core``), None
        for a top-level module (``clpatch``, ``clpatch.version``)."""
        parts = module.split(".")
        if len(parts) < 2 or parts[0] != self.package:
            return None
        return parts[1] if (self.package_dir / parts[1]).is_dir() else None


def is_private(name: str) -> bool:
    """``_x`` and ``__x`` are private; dunder names (``__version__``, ``__main__``) are not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_files(package_dir: Path, package_name: str) -> dict[str, Path]:
    """Module name -> file of every ``.py`` file under ``package_dir`` (``__init__.py`` names
    its package)."""
    out: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if not all(p.isidentifier() for p in parts):
            continue                                    # not importable (e.g. a folder "a-b")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([package_name, *parts])] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


class _Collector(ast.NodeVisitor):
    """Records the clpatch imports of one module, and the names they bind to modules."""

    def __init__(self, package: str, modules: Collection[str], module: str, is_package: bool,
                 file: str, source: str) -> None:
        self.package, self.modules, self.module = package, modules, module
        self.is_package, self.file, self.source = is_package, file, source
        self.function_depth = 0
        self.type_checking_depth = 0
        self.imports: list[Import] = []
        self.bound: dict[str, str] = {}          # local name -> clpatch module it is bound to

    def _ours(self, name: str) -> bool:
        return name == self.package or name.startswith(self.package + ".")

    def _add(self, node: ast.stmt, target: str, name: str | None) -> None:
        self.imports.append(Import(
            importer=self.module, target=target, name=name, file=self.file, line=node.lineno,
            in_function=self.function_depth > 0, type_checking=self.type_checking_depth > 0,
            statement=" ".join((ast.get_source_segment(self.source, node) or "").split())))

    def _function(self, node: ast.AST) -> None:
        self.function_depth += 1
        self.generic_visit(node)
        self.function_depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.type_checking_depth += 1
        for stmt in node.body:
            self.visit(stmt)
        self.type_checking_depth -= 1
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not self._ours(alias.name):
                continue
            self._add(node, alias.name, None)
            if alias.asname:
                self.bound[alias.asname] = alias.name
            else:                                # `import clpatch.a.b` binds `clpatch`
                self.bound[alias.name.split(".")[0]] = alias.name.split(".")[0]

    def _base(self, node: ast.ImportFrom) -> str | None:
        if not node.level:
            return node.module if node.module and self._ours(node.module) else None
        parts = self.module.split(".")
        if not self.is_package:
            parts = parts[:-1]
        if node.level - 1 >= len(parts):
            raise ValueError(f"{self.file}:{node.lineno}: relative import beyond the top package")
        parts = parts[:len(parts) - (node.level - 1)]
        return ".".join(parts + ([node.module] if node.module else []))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._base(node)
        if base is None:
            return
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if alias.name != "*" and sub in self.modules:
                self._add(node, sub, None)
                self.bound[alias.asname or alias.name] = sub
            else:
                self._add(node, base, alias.name)


def import_graph(package_dir: Path | str, package_name: str) -> ImportGraph:
    """Parse every module of the package at ``package_dir`` (imported as ``package_name``)."""
    package_dir = Path(package_dir)
    modules = module_files(package_dir, package_name)
    imports: list[Import] = []
    attributes: list[AttributeUse] = []
    for module, path in modules.items():
        source = path.read_text(encoding="utf-8")
        file = path.relative_to(package_dir.parent).as_posix()
        tree = ast.parse(source, filename=str(path))
        collector = _Collector(package_name, modules, module, path.name == "__init__.py", file,
                               source)
        collector.visit(tree)
        imports.extend(collector.imports)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in collector.bound and is_private(node.attr)
                    and collector.bound[node.value.id] != module):
                attributes.append(AttributeUse(module, collector.bound[node.value.id], file,
                                               node.lineno, f"{node.value.id}.{node.attr}"))
    return ImportGraph(package_name, package_dir, modules, imports, attributes)


def loaded_by_import_clpatch(part: str) -> list[str]:
    """The modules whose names contain `part` that a fresh `import clpatch` loads (an
    optional layer's must be none: users import it themselves)."""
    code = f"import sys, clpatch; print(sorted(m for m in sys.modules if {part!r} in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return ast.literal_eval(out.stdout.strip())


def root_only_offenders(subpackage: str, least: int) -> list[str]:
    """The imports of `clpatch.<subpackage>` (at least `least` modules) that reach past the
    package root's public names: another clpatch module, or a private name. The layers
    that are written as a user would write them (compat, vapoursynth) must have none."""
    graph = import_graph(PACKAGE_DIR, PACKAGE)
    prefix = f"{PACKAGE}.{subpackage}"
    ours = [m for m in graph.modules if m.startswith(prefix)]
    assert len(ours) >= least, ours
    offenders = [f"{imp.where}: `{imp.statement}`" for imp in graph.imports
                 if imp.importer in ours and imp.target != PACKAGE
                 and not imp.target.startswith(prefix)]
    offenders += [f"{imp.where}: private name `{imp.name}`" for imp in graph.imports
                  if imp.importer in ours and imp.name and imp.name.startswith("_")]
    return offenders


# --------------------------------------------------------------------------- the rules


def _strongly_connected(edges: Mapping[str, Collection[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(sorted(component))
    return out


def _shortest_cycle_through(start: str, edges: Mapping[str, Collection[str]],
                            within: Collection[str]) -> list[str] | None:
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges.get(node, ())):
                if child not in within:
                    continue
                if child == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return [start, *reversed(chain[:-1]), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return None


def import_cycles(graph: ImportGraph) -> list[str]:
    """Each import cycle as ``a -> b -> … -> a``: per strongly connected component, the
    shortest cycle through each of its modules (duplicates removed)."""
    edges = graph.edges()
    chains: set[tuple[str, ...]] = set()
    for component in _strongly_connected(edges):
        if len(component) == 1 and component[0] not in edges[component[0]]:
            continue
        for module in component:
            cycle = _shortest_cycle_through(module, edges, set(component))
            if cycle:
                body = cycle[:-1]
                k = body.index(min(body))               # one rotation per cycle
                chains.add(tuple(body[k:] + body[:k]))
    return sorted(" -> ".join([*c, c[0]]) for c in chains)


def private_uses(graph: ImportGraph) -> list[str]:
    """Rule (b): private names / modules of other clpatch modules, imported or used as
    attributes of an imported module; one line per statement and target."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for imp in graph.imports:
        if imp.target == imp.importer:
            continue
        reasons = found.setdefault((imp.where, imp.target, imp.statement), [])
        if any(is_private(p) for p in imp.target.split(".")[1:]) and not reasons:
            reasons.append(f"private module {imp.target}")
        if imp.name is not None and is_private(imp.name):
            reasons.append(f"private name {imp.name} of {imp.target}")
    out = [f"{where}: imports {' and '.join(reasons)}: `{statement}`"
           for (where, _, statement), reasons in found.items() if reasons]
    for use in graph.attributes:
        out.append(f"{use.file}:{use.line}: uses private attribute `{use.expr}` of {use.target}")
    return out


def local_imports(graph: ImportGraph, allowed: Mapping[tuple[str, str], str]) -> list[str]:
    """Rule (c): clpatch modules imported inside functions, less the allowed (importer,
    target) pairs; one line per statement and target."""
    return list(dict.fromkeys(
        f"{imp.where}: {imp.importer} imports {imp.target} inside a function: `{imp.statement}`"
        for imp in graph.imports if imp.in_function and (imp.importer, imp.target) not in allowed))


def unused_allowances(graph: ImportGraph, allowed: Mapping[tuple[str, str], str]) -> list[str]:
    used = {(imp.importer, imp.target) for imp in graph.imports if imp.in_function}
    return [f"{a} imports {b} inside a function: allowed ({why}) but no such import"
            for (a, b), why in allowed.items() if (a, b) not in used]


def layer_violations(graph: ImportGraph, layers: Mapping[str, Collection[str] | None],
                     top_level: Collection[str], shared_leaves: Collection[str] = ()) -> list[str]:
    """Rule (d): imports that go to a layer the importer may not import, and modules that
    belong to no layer."""
    out = []
    for module, path in graph.modules.items():
        layer = graph.subpackage_of(module)
        file = path.relative_to(graph.package_dir.parent).as_posix()
        if layer is None:
            if module not in top_level:
                out.append(f"{file}: top-level module {module} is in no layer (move it into a "
                           f"subpackage or add it to TOP_LEVEL)")
            continue
        if layer not in layers:
            out.append(f"{file}: subpackage {layer!r} has no layer rule (add it to LAYERS)")
            continue
        allowed = layers[layer]
        if allowed is None:
            continue
        for imp in graph.imports:
            if imp.importer != module:
                continue
            target_layer = graph.subpackage_of(imp.target)
            if target_layer is None:
                if imp.target in shared_leaves:
                    continue
                what = f"the top-level module {imp.target}"
            elif target_layer in allowed:
                continue
            else:
                what = f"{target_layer} ({imp.target})"
            out.append(f"{imp.where}: {layer} imports {what}; {layer} may import only "
                       f"{', '.join(sorted(allowed))}: `{imp.statement}`")
    return list(dict.fromkeys(out))


def long_modules(graph: ImportGraph, max_lines: int) -> list[str]:
    """Rule (e): modules of more than ``max_lines`` lines, longest first."""
    sizes = [(len(path.read_text(encoding="utf-8").splitlines()),
              path.relative_to(graph.package_dir.parent).as_posix())
             for path in graph.modules.values()]
    return [f"{file}: {n} lines" for n, file in sorted(sizes, key=lambda s: (-s[0], s[1]))
            if n > max_lines]


def plans_off_base(graph: ImportGraph, base_module: str, base: str = "Plan") -> list[str]:
    """Rule (f): classes named ``…Plan`` that do not derive from ``base`` (a class of
    ``base_module``), through classes of the package resolved by name."""
    classes: dict[str, tuple[str, list[str]]] = {}     # name -> (module, base names)
    for module, path in graph.modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = [b.id if isinstance(b, ast.Name) else b.attr
                         for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))]
                classes.setdefault(node.name, (module, names))

    def derives(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == base and classes.get(name, ("",))[0] == base_module:
            return True
        if name in seen or name not in classes:
            return False
        return any(derives(b, seen | {name}) for b in classes[name][1])

    return sorted(f"{module}.{name}" for name, (module, _) in classes.items()
                  if name.endswith("Plan") and not (name == base and module == base_module)
                  and not derives(name))


def package_imports(files: Collection[Path], package_name: str) -> list[str]:
    """Imports of ``package_name`` anywhere (functions included) in ``files``: the NumPy
    oracles of tests/reference must not use the code they check."""
    out = []
    for path in sorted(files):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n == package_name or n.startswith(package_name + ".") for n in names):
                out.append(f"{path.name}:{node.lineno}: `{ast.unparse(node)}`")
    return out


def report(title: str, offenders: list[str]) -> str:
    return f"{len(offenders)} {title}:\n  " + "\n  ".join(offenders)


# =========================================================================== the real package


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return import_graph(PACKAGE_DIR, PACKAGE)


def test_graph_sees_the_package(graph):
    """Guard against a checker that passes because it found nothing."""
    assert len(graph.modules) >= 20, sorted(graph.modules)
    assert {PACKAGE, f"{PACKAGE}.core.runtime", f"{PACKAGE}.denoise.bm3d"} <= set(graph.modules)
    assert f"{PACKAGE}.core.runtime" in graph.edges()[f"{PACKAGE}.denoise.bm3d"]


def test_no_import_cycles(graph):
    cycles = import_cycles(graph)
    assert not cycles, report("import cycles between clpatch modules (module-level imports, "
                              "`if TYPE_CHECKING:` ones included)", cycles)


def test_no_private_names_of_other_modules(graph):
    offenders = private_uses(graph)
    assert not offenders, report("uses of private names of other clpatch modules", offenders)


def test_no_local_imports_of_clpatch_modules(graph):
    offenders = local_imports(graph, LOCAL_IMPORTS_ALLOWED)
    offenders += unused_allowances(graph, LOCAL_IMPORTS_ALLOWED)
    assert not offenders, report("imports of clpatch modules inside functions (move them to the "
                                 "top, or add a reasoned entry to LOCAL_IMPORTS_ALLOWED)", offenders)


def test_layers(graph):
    offenders = layer_violations(graph, LAYERS, TOP_LEVEL, SHARED_LEAVES)
    assert not offenders, report("layering violations", offenders)


def test_module_length(graph):
    offenders = long_modules(graph, MAX_LINES)
    assert not offenders, report(f"modules longer than {MAX_LINES} lines", offenders)


def test_every_plan_derives_from_the_plan_base(graph):
    offenders = plans_off_base(graph, f"{PACKAGE}.core.plans")
    assert not offenders, report("plan classes not derived from clpatch.core.plans.Plan",
                                 offenders)
    assert "clpatch.core.plans" in graph.modules


def test_reference_oracles_import_nothing_from_clpatch():
    files = list((Path(__file__).resolve().parent / "reference").glob("*.py"))
    assert len(files) >= 5
    offenders = package_imports(files, PACKAGE)
    assert not offenders, report("clpatch imports in the NumPy oracles (tests/reference)", offenders)


# =========================================================================== the checker's own tests


def write_package(root: Path, files: dict[str, str], name: str = "pkg") -> Path:
    """Write ``files`` (path relative to the package folder -> source) under ``root/name``."""
    package_dir = root / name
    for rel, source in files.items():
        path = package_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return package_dir


SYNTHETIC_LAYERS: dict[str, frozenset[str] | None] = {
    "core": frozenset({"core"}),
    "match": frozenset({"core", "match"}),
    "cli": None,
}


def test_checker_finds_a_two_module_cycle(tmp_path):
    pkg = write_package(tmp_path, {
        "__init__.py": "",
        "a.py": "from . import b\n",
        "b.py": "from .a import f\n\ndef g():\n    return f\n",
        "c.py": "from . import a\n",                      # points into the cycle: not part of it
    })
    g = import_graph(pkg, "pkg")
    assert g.edges()["pkg.a"] == {"pkg.b"}                # `from . import b` is the submodule
    assert g.edges()["pkg.b"] == {"pkg.a"}
    assert import_cycles(g) == ["pkg.a -> pkg.b -> pkg.a"]


def test_checker_counts_type_checking_imports_and_package_inits(tmp_path):
    pkg = write_package(tmp_path, {
        "__init__.py": "from .sub.m import f\n",
        "sub/__init__.py": "",
        "sub/m.py": """\
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from pkg import Thing

            def f(): ...
            """,
        "sub/n.py": "from .. import sub\nfrom ..sub import m\nfrom ..sub import x\n",
    })
    g = import_graph(pkg, "pkg")
    assert [i.type_checking for i in g.imports if i.importer == "pkg.sub.m"] == [True]
    assert g.edges()["pkg.sub.n"] == {"pkg.sub", "pkg.sub.m"}   # package = its __init__.py
    assert import_cycles(g) == ["pkg -> pkg.sub.m -> pkg"]


def test_checker_reports_local_imports_not_as_cycles(tmp_path):
    pkg = write_package(tmp_path, {
        "__init__.py": "",
        "a.py": "from .b import g\n",
        "b.py": """\
            def g():
                import json                 # third-party / stdlib: fine
                from .a import h             # a clpatch module inside a function: reported
                return json, h

            class C:
                def method(self):
                    from pkg import c
                    return c
            """,
        "c.py": "",
    })
    g = import_graph(pkg, "pkg")
    assert import_cycles(g) == []
    offenders = local_imports(g, {})
    assert len(offenders) == 2
    assert offenders[0].startswith("pkg/b.py:3: pkg.b imports pkg.a inside a function")
    assert offenders[1].startswith("pkg/b.py:8: pkg.b imports pkg.c inside a function")
    allowed = {("pkg.b", "pkg.a"): "test", ("pkg.b", "pkg.c"): "test"}
    assert local_imports(g, allowed) == []
    assert unused_allowances(g, allowed) == []
    assert len(unused_allowances(g, {("pkg.a", "pkg.c"): "stale"})) == 1


def test_checker_finds_private_names(tmp_path):
    pkg = write_package(tmp_path, {
        "__init__.py": "from .version import __version__\n",
        "version.py": "__version__ = '1'\n",
        "a.py": "_f = _g = 1\npublic = 2\n_self = 3\nx = _self\n",
        "_impl.py": "y = 1\n",
        "b.py": """\
            import pkg._impl
            from pkg.a import _g
            from . import a, _impl as impl
            from ._impl import y
            from .a import _f, public, _g

            def use():
                return a._f, a.public, a.__name__, impl.y, _f, _g, y, public
            """,
    })
    offenders = private_uses(import_graph(pkg, "pkg"))
    assert [o.split(": `")[0] for o in offenders] == [
        "pkg/b.py:1: imports private module pkg._impl",
        "pkg/b.py:2: imports private name _g of pkg.a",
        "pkg/b.py:3: imports private module pkg._impl",
        "pkg/b.py:4: imports private module pkg._impl",
        "pkg/b.py:5: imports private name _f of pkg.a and private name _g of pkg.a",
        "pkg/b.py:8: uses private attribute `a._f` of pkg.a",
    ]


def test_checker_finds_upward_layer_imports(tmp_path):
    pkg = write_package(tmp_path, {
        "__init__.py": "from .match.y import f\n",
        "version.py": "",
        "stray.py": "",
        "core/__init__.py": "",
        "core/x.py": "from ..match.y import f\n",             # upward: reported
        "match/__init__.py": "",
        "match/y.py": "from ..core import x\nfrom .. import version\n\ndef f(): ...\n",
        "match/z.py": "def g():\n    import pkg\n    from ..cli import w\n",   # local ones count
        "cli/__init__.py": "",
        "cli/w.py": "from ..core import x\nfrom ..match import y\nimport pkg\n",
        "extra/__init__.py": "",
    })
    g = import_graph(pkg, "pkg")
    offenders = layer_violations(g, SYNTHETIC_LAYERS, {"pkg", "pkg.version"}, {"pkg.version"})
    assert [o.split(";")[0].split(" (move")[0].split(" (add")[0] for o in offenders] == [
        "pkg/core/x.py:1: core imports match (pkg.match.y)",
        "pkg/extra/__init__.py: subpackage 'extra' has no layer rule",
        "pkg/match/z.py:2: match imports the top-level module pkg",
        "pkg/match/z.py:3: match imports cli (pkg.cli.w)",
        "pkg/stray.py: top-level module pkg.stray is in no layer",
    ]


def test_checker_finds_long_modules(tmp_path):
    pkg = write_package(tmp_path, {"__init__.py": "", "short.py": "x = 1\n" * 10,
                                   "long.py": "x = 1\n" * 11})
    assert long_modules(import_graph(pkg, "pkg"), 10) == ["pkg/long.py: 11 lines"]


def test_checker_finds_plans_off_the_base(tmp_path):
    pkg = write_package(tmp_path, {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/plans.py": "class Plan:\n    pass\n\nclass PlanCache(dict):\n    pass\n",
        "match/__init__.py": "",
        "match/a.py": "from ..core import plans\nfrom ..core.plans import Plan\n\n"
                      "class SearchPlan(Plan):\n    pass\n\nclass PairPlan(SearchPlan):\n"
                      "    pass\n\nclass OtherPlan(plans.Plan):\n    pass\n\n"
                      "class LostPlan:\n    pass\n\nclass CyclePlan(CyclePlan):\n    pass\n",
    })
    assert plans_off_base(import_graph(pkg, "pkg"), "pkg.core.plans") == [
        "pkg.match.a.CyclePlan", "pkg.match.a.LostPlan"]


def test_checker_finds_package_imports_in_oracles(tmp_path):
    oracle = tmp_path / "oracle.py"
    oracle.write_text("import numpy as np\nfrom .search import grid\nimport pkgx\n\n"
                      "def f():\n    from pkg.a import b\n    import pkg\n", encoding="utf-8")
    assert package_imports([oracle], "pkg") == ["oracle.py:6: `from pkg.a import b`",
                                                "oracle.py:7: `import pkg`"]


def test_checker_passes_a_clean_package(tmp_path):
    pkg = write_package(tmp_path, {
        "__init__.py": "from .core.x import f\nfrom .version import __version__\n",
        "version.py": "__version__ = '1'\n",
        "core/__init__.py": "",
        "core/x.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .y import T\n"
                     "def f():\n    import json\n    return json\n",
        "core/y.py": "T = int\n",
        "match/__init__.py": "",
        "match/m.py": "from ..core import x\nfrom ..core.y import T\n\nx.f()\n",
    })
    g = import_graph(pkg, "pkg")
    assert len(g.imports) == 5
    assert import_cycles(g) == []
    assert private_uses(g) == []
    assert local_imports(g, {}) == []
    assert layer_violations(g, SYNTHETIC_LAYERS, {"pkg", "pkg.version"}, {"pkg.version"}) == []
    assert long_modules(g, 10) == []
