"""The house has floors, its folders show them, and imports run one way down (docs: "The map").

Parses every project source with `ast` (nothing is imported) and fails on: a folder no floor claims, an import that
runs up a floor, a circle of imports between modules or between folders, an import of one of the repository's
folders under its own top-level name (everything installs under `electra`), or a project import inside a function
outside the command-line modules (where such imports keep `electra --help` fast; anywhere else they hide a circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
FLOOR_NAMES = ("foundation", "data and components", "objectives and training", "consumers", "application")

# A folder's floor. Each top-level folder but electra/ installs as electra.<folder> (pyproject's package-dir).
FOLDER_FLOORS = {
    "electra.core": 0,
    "electra.nn": 1,
    "electra.data": 1,
    "electra.export": 1,
    "electra.generators": 1,
    "electra.discriminators": 1,
    "electra.flops": 1,
    "electra.objectives": 2,
    "electra.training": 2,
    "electra.finetune": 2,
    "electra.glue": 3,
    "electra.squad": 3,
    "electra.pll": 3,
    "electra.tlm": 3,
    "electra.probes": 3,
    "electra.tagging": 3,
    "electra.app": 4,
    "electra": 4,  # the package itself: the lazy public API and `python -m electra`
    "pretrain": 4,
    "bench": 4,
}


def package_dirs() -> dict[str, Path]:
    """Import name -> folder, as pyproject installs them."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = setuptools.get("package-dir", {})

    def folder(name: str) -> Path:  # as setuptools finds it: below the nearest mapped parent package
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in mapped:
                return REPO / mapped[".".join(parts[:n])] / "/".join(parts[n:])
        return REPO / "/".join(parts)

    return {name: folder(name) for name in setuptools["packages"]}


# Benchmarks whose workers import the library only in the subprocess that measures it, so a baseline measured
# beside it (the transformers path's memory) does not carry torch and this library.
SUBPROCESS_BENCHMARKS = ("bench.data_throughput",)


def is_cli(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return (
        last == "cli"
        or last.endswith("_cli")
        or module in ("electra", "electra.__main__")
        or module in SUBPROCESS_BENCHMARKS
    )


def folder_of(module: str) -> str:
    if module in ("pretrain",) or module.startswith("bench"):
        return module.split(".")[0]
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in FOLDER_FLOORS:
            return ".".join(parts[:n])
    raise KeyError(module)


def floor_of(module: str) -> int:
    if is_cli(module):
        return 4
    return FOLDER_FLOORS[folder_of(module)]


def project_modules() -> dict[str, Path]:
    modules = {"pretrain": REPO / "pretrain.py"}
    for path in (REPO / "bench").glob("*.py"):
        modules[f"bench.{path.stem}"] = path
    for package, folder in package_dirs().items():
        for path in folder.glob("*.py"):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules[name] = path
    return modules


def imports_of(module: str, path: Path, known: set[str]) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import statement of `path`; a project module when it
    is one of `known`, else the name as written."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def resolve(name: str) -> str:
        probe = name
        while probe and probe not in known:
            probe = probe.rpartition(".")[0]
        return probe or name

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append((resolve(alias.name), child.lineno, in_function))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - child.level + 1] + [base]
                    ).strip(".")
                for alias in child.names:  # `from pkg import module` imports the submodule
                    full = f"{base}.{alias.name}"
                    found.append((full if full in known else resolve(base), child.lineno, in_function))
            visit(child, nested)

    visit(tree, False)
    return [(target, line, inside) for target, line, inside in found if target != module]


def import_graph() -> tuple[dict[str, Path], dict[str, list[tuple[str, int, bool]]]]:
    modules = project_modules()
    known = set(modules)
    graph = {name: imports_of(name, path, known) for name, path in modules.items()}
    return modules, graph


def project_edges() -> dict[str, list[tuple[str, int, bool]]]:
    modules, graph = import_graph()
    return {m: [e for e in edges if e[0] in modules] for m, edges in graph.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    found: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                found.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_every_folder_has_a_floor():
    modules, _ = import_graph()
    homeless = []
    for name in modules:
        try:
            folder_of(name)
        except KeyError:
            homeless.append(name)
    assert not homeless, f"modules in a folder no floor claims (add it to FOLDER_FLOORS): {sorted(homeless)}"


def test_the_package_installs_one_import_name():
    assert {name.split(".")[0] for name in package_dirs()} == {"electra"}


def test_every_package_folder_is_installed():
    """A folder with an `__init__.py` that pyproject does not list is left out of the wheel (an editable install
    hides that), and this checker would not read its imports either."""
    listed = {path.resolve() for path in package_dirs().values()}
    missing = sorted(
        str(init.parent.relative_to(REPO))
        for folder in package_dirs().values()
        for init in folder.rglob("__init__.py")
        if init.parent.resolve() not in listed and "__pycache__" not in init.parts
    )
    assert not missing, f"add these to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_no_folder_is_imported_under_its_own_top_level_name():
    """`import glue` would load the folder as a second, unrelated copy (or another distribution's `glue`)."""
    _, graph = import_graph()
    tops = {path.name for path in package_dirs().values()} - {"electra"}
    stray = [
        f"{module}:{line} imports {target}"
        for module, edges in graph.items()
        for target, line, _ in edges
        if target.split(".")[0] in tops
    ]
    assert not stray, "import these as electra.<folder>:\n" + "\n".join(stray)


def test_no_import_runs_up_a_floor():
    upward = [
        f"{module}:{line} ({FLOOR_NAMES[floor_of(module)]}) imports {target} ({FLOOR_NAMES[floor_of(target)]})"
        for module, edges in project_edges().items()
        for target, line, _ in edges
        if floor_of(target) > floor_of(module)
    ]
    assert not upward, "imports running up a floor:\n" + "\n".join(upward)


CONSUMER = FLOOR_NAMES.index("consumers")


def consumer_crossings(edges: dict[str, list[tuple[str, int, bool]]]) -> list[str]:
    """Imports from one consumer folder (glue, squad, tagging, ...) into another: what they share belongs on the
    fine-tuning floor below them."""
    return [
        f"{module}:{line} imports {target}"
        for module, targets in edges.items()
        if floor_of(module) == CONSUMER
        for target, line, _ in targets
        if floor_of(target) == CONSUMER and folder_of(target) != folder_of(module)
    ]


def test_no_consumer_imports_another():
    crossings = consumer_crossings(project_edges())
    assert not crossings, "consumers importing each other (move the shared part down a floor):\n" + "\n".join(
        crossings
    )


def test_no_import_circles_between_modules():
    edges = {module: {target for target, _, _ in targets} for module, targets in project_edges().items()}
    found = circles(edges)
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_import_circles_between_folders():
    """Read per folder, the graph runs one way: no folder imports one that imports it back."""
    edges: dict[str, set[str]] = {}
    for module, targets in project_edges().items():
        for target, _, _ in targets:
            here, there = folder_of(module), folder_of(target)
            if here != there and not (here == "electra" and module != "electra"):
                edges.setdefault(here, set()).add(there)
    found = circles(edges)
    assert not found, "folders importing each other:\n" + "\n".join(" -> ".join(c) for c in found)


def test_project_imports_inside_functions_only_in_command_line_modules():
    hidden = [
        f"{module}:{line} imports {target} inside a function"
        for module, edges in project_edges().items()
        if not is_cli(module)
        for target, line, inside in edges
        if inside
    ]
    assert not hidden, "move these imports to the top of the module:\n" + "\n".join(hidden)


def test_the_checker_sees_a_planted_upward_import_and_circle(tmp_path):
    """The checks above are only as good as the parser: plant violations and see them found."""
    (tmp_path / "low.py").write_text("import high\n")
    (tmp_path / "high.py").write_text("def f():\n    from low import x\n")
    known = {"low", "high"}
    assert imports_of("low", tmp_path / "low.py", known) == [("high", 1, False)]
    assert imports_of("high", tmp_path / "high.py", known) == [("low", 2, True)]
    assert circles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]
    assert floor_of("electra.glue.finetune") == 3 and floor_of("electra.glue.cli") == 4
    assert floor_of("electra.training.engine") > floor_of("electra.export.layout")
    planted = {
        "electra.tagging.finetune": [
            ("electra.glue.finetune", 3, False),
            ("electra.finetune.seeds", 4, False),
        ]
    }
    assert consumer_crossings(planted) == ["electra.tagging.finetune:3 imports electra.glue.finetune"]
