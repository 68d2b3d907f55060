"""The package map's rule (README, Layout): imports go one way, so there is no import circle, and no module
imports one of a layer above its own. Read from the source (every `from .x import` / `from ..x import`,
inside functions too), so a lazy import that closes a circle is caught as well. And files by one job: no module
over 500 lines, no function over 80."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hf_langspec"
# README: cli -> compare -> training, evaluation, export (and pipelines) -> data, tokenization (and interop,
# pretrained, model_folder) -> modeling (and environment, files, config_types, stopping)
LAYERS = {"cli": 5, "compare": 4, "training": 3, "evaluation": 3, "export": 3, "pipelines": 3, "data": 2,
          "tokenization": 2, "interop": 2, "pretrained": 2, "model_folder": 2, "modeling": 1, "environment": 1,
          "files": 1, "config_types": 1, "stopping": 1}  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def relative_imports() -> dict[str, set[str]]:
    """`{module: modules it imports}` over hf_langspec's own modules (package `__init__` re-exports left out)."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            named = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in files]
            for imported in named or ([target] if target in files else []):
                if imported != name and files[imported].name != "__init__.py":
                    graph[name].add(imported)
    return graph


def layer(module: str) -> int | None:
    """A module's layer: its folder's, or a top-level module's own (`hf_langspec.interop`); None for the root."""
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def test_every_folder_and_top_level_module_has_a_layer():
    tops = {module.split(".")[1] for module in relative_imports() if module.count(".") >= 1}
    assert tops - set(LAYERS) <= {"metrics"}  # metrics/: evaluate's loading scripts, imported by path only


def test_no_module_imports_a_layer_above_its_own():
    upward = [
        f"{module} -> {imported}"
        for module, imports in relative_imports().items()
        for imported in imports
        if layer(module) is not None and layer(imported) is not None and layer(imported) > layer(module)
    ]
    assert upward == []


def test_there_is_no_import_circle():
    graph = relative_imports()
    circles = []
    for start in graph:  # a path from a module back to itself
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    circles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert circles == []


MAX_FILE_LINES, MAX_FUNCTION_LINES = 500, 80  # issue 61: files by one job, functions that fit on a screen


def test_no_module_is_over_500_lines_and_no_function_over_80():
    """Files by one job: a module past 500 lines or a function past 80 (decorators and docstring included) is split
    before it lands; the message names each one with its length."""
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(PACKAGE.parent)
        if (lines := len(source.splitlines())) > MAX_FILE_LINES:
            too_long.append(f"{where}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (lines := node.end_lineno - start + 1) > MAX_FUNCTION_LINES:
                    too_long.append(f"{where}:{node.lineno} {node.name}: {lines} lines")
    assert too_long == []


# Every import sits at its module's top, but for these. Deferring one saves no start-up time: `import hf_langspec`
# (which every submodule's import runs first) registers the models with the Auto classes, so torch, transformers
# and datasets are loaded by `hf-langspec --help` already (about 5 s on the 2-core CI machine).
# A third-party module that is an optional extra: the package and the CLI import without it (tested below).
OPTIONAL_MODULES = {
    **dict.fromkeys(["lingua", "matplotlib", "lang2vec", "pkg_resources"], "the [eval] extra"),
    "ctranslate2": "the [export] extra",
    "pydantic": "the [serve] extra (FastAPI's)",
    "sentencepiece": "its model file needs protobuf, whose absence is said in one line where it is read",
}  # fmt: skip
# one function's imports that stay inside it, and why ("file:function")
PLACED_INSIDE = {
    "cli/sharing_commands.py:cmd_serve": "the [serve] extra: export.server needs FastAPI at its top",
    **dict.fromkeys(["compare/runner.py:compare", "compare/learning_curve.py:_test_scores"],
                    "compare.worker runs as `python -m hf_langspec.compare.worker`; imported by its package first, "
                    "runpy warns that it may behave unpredictably (test_compare checks the worker's log)"),
    "export/push.py:probe_logits": "its source alone is written out as the probe's module, which runs where "
    "hf_langspec is not installed",
    "tokenization/training.py:_corpus_sample": "data.processing imports tokenization at its top: data.columns at the "
    "top here closes a circle through data's and tokenization's __init__ (tried: ImportError)",
    "training/steps/train.py:write_run_info": "the package root defines __version__ after importing the modules "
    "that import this one",
    "training/static_shapes.py:use_compile_cache": "a private torch module that older torch lacks: imported under try",
}  # fmt: skip
# what only the server needs: the modules that import the [serve] extra at their top
SERVE_MODULES = {"hf_langspec.export.access", "hf_langspec.export.api", "hf_langspec.export.server"}


def function_level_imports() -> list[tuple[str, str, int, str]]:
    """`(file, function, line, module)` for every import inside a function of the package; `module` starts with a
    dot for a relative import."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                    level = "." * node.level if isinstance(node, ast.ImportFrom) else ""
                    found.append((str(path.relative_to(PACKAGE)), function.name, node.lineno, level + (module or "")))
    return sorted(set(found))


def test_imports_inside_functions_have_a_reason():
    """An import inside a function is an optional extra (`OPTIONAL_MODULES`) or sits in a function whose reason is
    in `PLACED_INSIDE`; every other import is at its module's top, where a reader looks for what a module uses."""
    unexplained = [
        f"{path}:{line} {module} (in {function})"
        for path, function, line, module in function_level_imports()
        if module.split(".")[0] not in OPTIONAL_MODULES and f"{path}:{function}" not in PLACED_INSIDE
    ]
    assert unexplained == [], "import these at the module's top, or give the function a reason in PLACED_INSIDE"
    stale = [
        where for where in PLACED_INSIDE if not any(f"{p}:{f}" == where for p, f, _, _ in function_level_imports())
    ]
    assert stale == [], "these functions no longer import anything inside: remove their reasons"


BLOCK_EXTRAS = """
import importlib, importlib.abc, pkgutil, sys
OPTIONAL = {"fastapi", "uvicorn", "starlette", "prometheus_client", "ctranslate2", "lingua", "matplotlib", "lang2vec",
            "langid", "py3langid", "mkdocs", "pydantic"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in OPTIONAL:
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Block())
import hf_langspec
for info in pkgutil.walk_packages(hf_langspec.__path__, "hf_langspec."):
    if ".metrics" in info.name or info.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(info.name)
    except Exception as err:
        print(info.name, type(err).__name__, err)
"""


def test_the_package_and_the_cli_import_without_the_optional_extras():
    """A user without [eval], [export], [serve] or [docs] imports every module but the server's, and `hf-langspec`
    starts: moving an import to a module's top must not make an extra required (the [serve] check in
    export/server.py says what to install)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", BLOCK_EXTRAS], capture_output=True, text=True, check=True).stdout
    failed = {line.split()[0] for line in out.splitlines()}
    assert failed == SERVE_MODULES, out


def _module_level_names(tree: ast.Module) -> tuple[set[str], set[str], list[str]]:
    """A module's own definitions, the names it imports, and its `__all__`."""
    own, imported, exported = set(), set(), []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            own |= {t.id for t in targets if isinstance(t, ast.Name)}
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                exported = [e.value for e in node.value.elts]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return own, imported, exported


def test_every_name_has_one_home():
    """A module exports what it defines: no re-export of a name that lives elsewhere (a package's `__init__`, the
    public face of its folder, excepted), so each name is imported from the module that defines it."""
    shims = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py":
            continue
        own, imported, exported = _module_level_names(ast.parse(path.read_text()))
        shims += [f"{module_name(path)}.{name}" for name in exported if name in imported and name not in own]
    assert shims == []


def test_no_private_name_is_imported_from_another_module():
    """`from module import _name` across modules (the package, tests, scripts, benchmarks) makes a private name
    part of an interface: such a name is made public where it is defined."""
    root = PACKAGE.parent
    tests = {p.stem for p in (root / "tests").glob("*.py")}
    found = []
    for folder in ("hf_langspec", "tests", "scripts", "benchmarks"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                    continue
                ours = node.level or (node.module or "").startswith("hf_langspec") or node.module in tests
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if ours and private:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {', '.join(private)}")
    assert found == []


def test_no_step_of_a_run_imports_another():
    """training/steps/: each step takes what it needs and returns a dataclass; what they hand each other lives in
    steps/context.py, so no step module imports a sibling step (experiment.py composes them)."""
    graph = relative_imports()
    steps = {m for m in graph if m.startswith("hf_langspec.training.steps.") and not m.endswith(".context")}
    assert steps and {f"{m} -> {i}" for m in steps for i in graph[m] if i in steps} == set()
