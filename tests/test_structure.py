"""The package's shape, held as tinygrad holds its line counts: the layers of abstraction and their import
direction (every import, function-level ones included, read from the source), and the line budgets."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kuiper"

#: sub-package -> its layer: a module may import from its own sub-package and from lower layers only; the two
#: backends share a layer and import neither each other
LAYERS = {"core": 0, "pnnx": 1, "layers": 2, "cpu": 3, "opencl": 3, "custom": 4, "runtime": 5, "llm": 5.2,
          "detection": 5.2, "app": 6}
#: the package's __init__ gathers the engine's API (above the runtime, below the application, which uses it);
#: `python -m kuiper` starts the application
LAYERS |= {"kuiper": 5.5, "__main__": 7}


def unit(module: str) -> str:
    """'kuiper.layers.conv2d' -> 'layers'; pyopencl counts as the OpenCL backend's; the package -> 'kuiper'."""
    parts = module.split(".")
    if parts[0] == "pyopencl":
        return "opencl"
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "kuiper"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def kuiper_imports(path: Path) -> set:
    """Every kuiper module (and pyopencl) this file imports, wherever the import statement sits."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] in ("kuiper", "pyopencl"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] == "pyopencl":
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] == "kuiper":
            # `from kuiper.x import y` names module kuiper.x.y where y is a sub-module
            found.update(f"{node.module}.{alias.name}" if (PACKAGE.parent / node.module.replace(".", "/") /
                                                           alias.name).exists() else node.module
                         for alias in node.names)
    return found


def sources() -> list:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_sub_package_has_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(LAYERS) - {"kuiper", "__main__"}, "a new sub-package needs its place in LAYERS"
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == [], f"modules belong in a sub-package: {loose}"


def test_imports_flow_one_way():
    """core <- pnnx <- layers <- backends (cpu, opencl; then custom) <- runtime <- llm <- app: no import goes up or
    sideways, so there is no cycle between sub-packages and no reference layer imports a backend (pyopencl
    included)."""
    wrong = []
    for path in sources():
        here = unit(module_name(path))
        if path.name == "__main__.py":
            here = "__main__"
        for imported in kuiper_imports(path):
            there = unit(imported)
            if there != here and LAYERS[there] >= LAYERS[here]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)} ({here}) imports {imported} ({there})")
    assert wrong == [], "\n".join(wrong)


BUDGETS = [("runtime/graph.py", 400)] + [(f"layers/{p.name}", 250) for p in sorted((PACKAGE / "layers").glob("*.py"))]


@pytest.mark.parametrize("relative, most", BUDGETS, ids=[b[0] for b in BUDGETS])
def test_line_budget(relative, most):
    lines = len((PACKAGE / relative).read_text().splitlines())
    assert lines <= most, f"kuiper/{relative} has {lines} lines (budget {most})"


def test_no_module_over_500_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in sources() if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}, long
