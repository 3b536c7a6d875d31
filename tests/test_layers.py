"""The house has floors, and imports run one way down (README, "Map").

Parses every project source with `ast` (nothing is imported) and fails on: a module no floor claims, an import
that runs up a floor, a circle of imports, or a project import inside a function outside the command-line modules
(where such imports keep `electra --help` fast; anywhere else they only hide a circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("electra", "generators", "discriminators", "flops", "glue", "squad", "pll", "tlm", "probes")

# Most specific prefix wins. 0 foundation, 1 components, 2 objectives/model/engine/export, 3 consumers, 4 application.
FLOORS = {
    "electra": 4,  # the package itself: the lazy public API (electra.api)
    "electra.errors": 0,
    "electra.config": 0,
    "electra.masking": 0,
    "electra.hf_configs": 0,
    "electra.outputs": 0,
    "electra.metrics": 0,
    "electra.overwrite": 0,
    "electra.siblings": 0,
    "electra.flags": 0,
    "electra.local_metrics": 0,
    "electra.version": 0,
    "electra.text_form": 0,
    "electra.dropout": 0,
    "electra.lane_attention": 0,
    "electra.cpu_memory": 0,
    "electra.files": 0,
    "electra.output_lock": 0,
    "electra.plugin_sources": 0,
    "electra.corpus": 1,
    "electra.tokenization": 1,
    "electra.data": 1,
    "electra.embedded_corpus": 1,
    "generators": 1,
    "discriminators": 1,
    "flops": 1,
    "electra.objectives": 2,
    "electra.model": 2,
    "electra.export": 2,
    "electra.model_card": 2,
    "electra.optim": 2,
    "electra.checkpoint": 2,
    "electra.run_log": 2,
    "electra.trackers": 2,
    "electra.engine": 2,
    "electra.pretraining": 2,
    "electra.continued": 2,
    "flops.objective_step": 2,
    "glue": 3,
    "squad": 3,
    "pll": 3,
    "tlm": 3,
    "probes": 3,
    "electra.api": 4,
    "electra.cli": 4,
    "electra.pretrain_cli": 4,
    "electra.plot": 4,
    "electra.compare": 4,
    "electra.compare_cli": 4,
    "electra.compare_settings": 4,
    "flops.paper": 4,
    "flops.report": 4,
    "pretrain": 4,
    "bench": 4,
}
FLOOR_NAMES = ("foundation", "components", "objectives/model/engine/export", "consumers", "application")


def is_cli(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return last == "cli" or last.endswith("_cli") or module == "electra"


def floor_of(module: str) -> int | None:
    if is_cli(module) and module != "electra":
        return 4
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        floor = FLOORS.get(".".join(parts[:n]))
        if floor is not None:
            return floor
    return None


def project_modules() -> dict[str, Path]:
    modules = {"pretrain": REPO / "pretrain.py"}
    for path in (REPO / "bench").glob("*.py"):
        modules[f"bench.{path.stem}"] = path
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imports_of(module: str, path: Path, known: set[str]) -> list[tuple[str, int, bool]]:
    """(imported project module, line, inside a function) for every import statement of `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    target = resolve(alias.name)
                    if target:
                        found.append((target, child.lineno, in_function))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - child.level + 1] + [base]
                    ).strip(".")
                for alias in child.names:  # `from pkg import module` imports the submodule
                    target = (
                        resolve(f"{base}.{alias.name}") if f"{base}.{alias.name}" in known else resolve(base)
                    )
                    if target:
                        found.append((target, child.lineno, in_function))
            visit(child, nested)

    visit(tree, False)
    return [(target, line, inside) for target, line, inside in found if target != module]


def import_graph() -> tuple[dict[str, Path], dict[str, list[tuple[str, int, bool]]]]:
    modules = project_modules()
    known = set(modules)
    return modules, {name: imports_of(name, path, known) for name, path in modules.items()}


def test_every_module_has_a_floor():
    modules, _ = import_graph()
    homeless = sorted(name for name in modules if floor_of(name) is None)
    assert not homeless, f"modules no floor claims (add them to FLOORS): {homeless}"


def test_no_import_runs_up_a_floor():
    _, graph = import_graph()
    upward = []
    for module, edges in graph.items():
        for target, line, _ in edges:
            if floor_of(target) > floor_of(module):
                upward.append(
                    f"{module}:{line} ({FLOOR_NAMES[floor_of(module)]}) imports {target} "
                    f"({FLOOR_NAMES[floor_of(target)]})"
                )
    assert not upward, "imports running up a floor:\n" + "\n".join(upward)


def test_no_import_circles():
    _, graph = import_graph()
    edges = {module: sorted({target for target, _, _ in targets}) for module, targets in graph.items()}
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in edges.get(module, []):
            if state.get(target) == 1:
                circles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_project_imports_inside_functions_only_in_command_line_modules():
    _, graph = import_graph()
    hidden = [
        f"{module}:{line} imports {target} inside a function"
        for module, edges in graph.items()
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
    low = imports_of("low", tmp_path / "low.py", known)
    high = imports_of("high", tmp_path / "high.py", known)
    assert low == [("high", 1, False)]
    assert high == [("low", 2, True)]
