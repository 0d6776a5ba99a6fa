"""The layout's rules, read from the imports (docs/contributing.md, "How the code is laid
out"): the stages import downwards only, no two modules import each other, ``shards/``
reads records, not LMDB, and keeps a few rooms (its format below its stores, the sampler
apart from both), the CPU transforms do not reach into ``gpu/``, nothing on the
data path imports the tooling, the seeds have one home, and a module past 500 lines is
split where its concerns part."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fastload"
TOOLING = {"tools", "testing"}


def module_name(path: Path) -> str:
    """``fastload.decode.gpu`` for ``src/fastload/decode/gpu.py``."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """The fastload modules ``path`` imports, anywhere in it (lazy imports and those for
    type checking included: each is an arrow a reader follows)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("fastload"):
                for alias in node.names:  # a submodule by name, or a name of the module
                    submodule = f"{node.module}.{alias.name}"
                    found.add(submodule if submodule in MODULE_NAMES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("fastload"))
    return found


MODULE_NAMES = {module_name(path) for path in PACKAGE.rglob("*.py")}
MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}
IMPORTS = {
    name: {m for m in imported(path) if m in MODULES and m != name}
    for name, path in MODULES.items()
}


def unit(name: str) -> str:
    """The stage a module belongs to: its folder under fastload/, or itself."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "fastload"


def test_no_two_modules_import_each_other():
    mutual = [
        (a, b) for a, b in itertools.combinations(sorted(IMPORTS), 2)
        if b in IMPORTS[a] and a in IMPORTS[b]
    ]  # fmt: skip
    assert mutual == []


def test_the_stages_import_downwards_only():
    arrows = {
        (unit(a), unit(b))
        for a, targets in IMPORTS.items()
        for b in targets
        if unit(a) != unit(b) and unit(a) != "fastload"  # the package's own exports
    }
    stages = {stage for arrow in arrows for stage in arrow}
    # a graph of stages with no circle can be laid out on floors, each arrow going down
    remaining, floors = set(stages), []
    while remaining:
        bottom = {s for s in remaining if not any(a == s and b in remaining for a, b in arrows)}
        assert bottom, f"stages that import each other round a circle: {sorted(remaining)}"
        floors.append(sorted(bottom))
        remaining -= bottom
    assert floors.index(next(f for f in floors if "gpu" in f)) < floors.index(
        next(f for f in floors if "decode" in f)
    )  # GPUDecoder uses the kernels; the kernels know nothing of decoding


@pytest.mark.parametrize(
    ("importer", "forbidden"),
    [
        ("shards", "lmdb"),
        ("transforms", "gpu"),
        ("records", "lmdb"),
        ("records", "shards"),
        ("testing", "tools"),
    ],  # the test helpers sit under the command line, not above it
)
def test_a_stage_does_not_reach_into_another_it_has_no_business_with(importer, forbidden):
    reached = sorted(
        (a, b) for a, targets in IMPORTS.items() for b in targets
        if unit(a) == importer and unit(b) == forbidden
    )  # fmt: skip
    assert reached == []


def test_nothing_on_the_data_path_imports_the_tooling():
    reached = sorted(
        (a, b) for a, targets in IMPORTS.items() for b in targets
        if unit(b) in TOOLING and unit(a) not in TOOLING | {"fastload"}
    )  # fmt: skip
    assert reached == []


#: Lines past which a module asks to be read again: does it hold one concern? A module is
#: split where its concerns part, never to get under a count.
ALARM_LINES = 500


def test_a_module_past_the_alarm_is_split_by_concern():
    long = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > ALARM_LINES
    }
    assert long == {}, (
        f"over {ALARM_LINES} lines: {long}. Find where its concerns part and split it there, "
        "each part named for what it holds (not to get under the count)"
    )


def test_per_sample_seeds_have_one_home():
    """The hash's constants and the seeds' context variables live in ``fastload.seeds``
    alone; others import them."""
    homes = sorted(
        name for name, path in MODULES.items()
        if any(mark in path.read_text() for mark in ("ContextVar(", "0xBF58476D1CE4E5B9"))
    )  # fmt: skip
    assert homes == ["fastload.seeds"]


def test_shards_keeps_a_few_rooms_named_for_what_is_inside():
    rooms = sorted(
        path.name for path in (PACKAGE / "shards").iterdir()
        if path.suffix == ".py" or (path / "__init__.py").exists()
    )  # fmt: skip
    assert len(rooms) <= 8, rooms


@pytest.mark.parametrize(
    ("importer", "forbidden"),
    [
        # what a shard set is on disk knows nothing of where its bytes come from
        ("fastload.shards.format", "fastload.shards.stores"),
        ("fastload.shards.format", "fastload.shards.writing"),
        ("fastload.shards.format", "fastload.shards.dataset"),
        ("fastload.shards.stores", "fastload.shards.writing"),
        ("fastload.shards.stores", "fastload.shards.dataset"),
        ("fastload.shards.stores", "fastload.shards.order"),
        # the sampler only orders: the loader hands its order to the dataset's download
        ("fastload.shards.order", "fastload.shards.stores"),
    ],
)
def test_a_room_of_shards_does_not_reach_into_another(importer, forbidden):
    def within(name: str, room: str) -> bool:
        return name == room or name.startswith(f"{room}.")

    reached = sorted(
        (a, b) for a, targets in IMPORTS.items() for b in targets
        if within(a, importer) and within(b, forbidden)
    )  # fmt: skip
    assert reached == []
