"""The layering of ARCHITECTURE.md: the protocol codec is sans-IO, storage knows nothing of the network."""

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "tidelog"
FORBIDDEN = {
    "protocol": {"asyncio", "socket", "selectors", "ssl", "tidelog.storage", "tidelog.broker"},
    "storage": {"asyncio", "socket", "selectors", "ssl", "tidelog.broker", "tidelog.metadata"},
    "common": {"asyncio", "socket", "tidelog.protocol", "tidelog.storage", "tidelog.broker"},
}


def imported_modules(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_import_forbidden_modules(package: str) -> None:
    offenders = []
    for path in sorted((SRC / package).rglob("*.py")):
        for name in imported_modules(path):
            if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN[package]):
                offenders.append(f"{path.relative_to(SRC)} imports {name}")
    assert offenders == []
