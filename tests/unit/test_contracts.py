"""The import contracts in pyproject.toml keep up with the code: the list of pure modules
is exactly the modules that say so (a docstring sentence starting "Pure"), and the
broker's layers contract names every module of the broker, so a new module cannot sit
outside the layering unnoticed.  `make lint` runs this file too."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.glob("libs/*/src"), *ROOT.glob("services/*/src")])
# A sentence of the module's docstring that starts with "Pure" ("Pure: no I/O.", "Pure.",
# "Pure (protobuf and JSON only): ...").
CLAIM = re.compile(r"(?:^|[.;]\s+)Pure(?:[:.]|\s\()", re.M)


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _modules() -> dict[str, Path]:
    found = {}
    for root in SOURCES:
        for path in root.rglob("*.py"):
            if path.name.endswith("_pb2.py"):
                continue
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _says_pure(path: Path) -> bool:
    return bool(CLAIM.search(ast.get_docstring(ast.parse(path.read_text())) or ""))


def test_the_pure_contract_lists_exactly_the_modules_that_say_they_are_pure():
    [pure] = [c for c in _contracts() if c["name"].startswith("Pure modules")]
    claimed = {name for name, path in _modules().items() if _says_pure(path)}
    listed = set(pure["source_modules"])
    assert sorted(claimed - listed) == [], "say they are pure but are not in the contract"
    assert sorted(listed - claimed) == [], "in the contract but do not say they are pure"


def test_the_broker_layers_name_every_broker_module():
    [layers] = [c for c in _contracts() if c.get("containers") == ["magnetar_broker"]]
    named = {name.strip(" ()") for layer in layers["layers"] for name in re.split(r"[|:]", layer)}
    top = {name.split(".")[1] for name in _modules() if name.startswith("magnetar_broker.")}
    assert sorted(top - named) == [], "broker modules in no layer of the broker's contract"
    assert sorted(named - top) == [], "layers naming no module"


def test_the_client_ships_its_types():
    """PEP 561: an application's type checker reads the client's annotations only when the
    package carries py.typed (and the wheel includes it)."""
    client = ROOT / "libs/client"
    assert (client / "src/magnetar/py.typed").exists()
    data = tomllib.loads((client / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["*"]


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_documentation_link_resolves_inside_the_repository():
    """Relative links of the docs (and README) name a file of the repository and, with an
    anchor, one of its headings; a "design.md §N" in the code names a section of
    docs/design.md.  Nothing points outside the project."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    anchors = {p.resolve(): {_slug(h) for h in re.findall(r"^#+ (.*)$", p.read_text(), re.M)}
               for p in pages}
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page.resolve()
            if not resolved.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and resolved in anchors and anchor not in anchors[resolved]:
                broken.append(f"{page.name}: {target} (no such heading)")
    sections = set(re.findall(r"^## (\d+)\. ", (ROOT / "docs/design.md").read_text(), re.M))
    for root in [*SOURCES, ROOT / "bench"]:
        for path in root.rglob("*.py"):
            for section in re.findall(r"design\.md §(\d+)", path.read_text()):
                if section not in sections:
                    broken.append(f"{path.relative_to(ROOT)}: design.md §{section}")
    assert broken == []
