"""Which folders of the checkout make the ``offload`` package: derived from the tree, not listed.

The pipeline's stages sit at the top level (``ir/``, ``frontends/``, ``passes/``, …) and install
as ``offload.<stage>``; ``offload/`` itself is the package root. Every folder with an
``__init__.py`` under them is a sub-package, and every other file in a package folder (kernel
sources, schemas, licences) ships as its data. The metadata is in ``pyproject.toml``.
"""

from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
# Package folders at the top level that are for developers, not users: not in the wheel.
DEVELOPER_ONLY = {"tests", "fuzz"}
SKIPPED_FILES = {".pyc", ".pyo", ".py"}


def _top_packages() -> list[Path]:
    return sorted(
        d
        for d in ROOT.iterdir()
        if d.is_dir() and (d / "__init__.py").is_file() and d.name not in DEVELOPER_ONLY
    )


def _name(folder: Path) -> str:
    parts = folder.relative_to(ROOT).parts
    return "offload" if parts == ("offload",) else ".".join(("offload", *parts))


def layout() -> tuple[list[str], dict[str, str], dict[str, list[str]]]:
    """(package names, package → folder, package → data files relative to its folder)."""
    packages, folders, data = [], {}, {}
    for top in _top_packages():
        folders[_name(top)] = top.name
        for init in sorted(top.rglob("__init__.py")):
            folder = init.parent
            if "__pycache__" in folder.parts or not _is_package_path(top, folder):
                continue
            packages.append(_name(folder))
            files = [
                str(f.relative_to(folder))
                for f in sorted(folder.rglob("*"))
                if f.is_file()
                and f.suffix not in SKIPPED_FILES
                and "__pycache__" not in f.parts
                and _owner(top, f) == folder
            ]
            if files:
                data[_name(folder)] = files
    return packages, folders, data


def _is_package_path(top: Path, folder: Path) -> bool:
    """Every folder from ``top`` down to ``folder`` has an ``__init__.py``."""
    while folder != top:
        if not (folder / "__init__.py").is_file():
            return False
        folder = folder.parent
    return True


def _owner(top: Path, path: Path) -> Path:
    """The innermost package folder holding ``path``."""
    folder = path.parent
    while folder != top and not _is_package_path(top, folder):
        folder = folder.parent
    return folder


if __name__ == "__main__":
    packages, folders, data = layout()
    setup(packages=packages, package_dir=folders, package_data=data)
