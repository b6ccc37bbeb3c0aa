"""The layers of the code hold: import-linter's contracts of pyproject.toml ([tool.importlinter]:
each layer imports only the ones below it, and the LLVM and CUDA back ends not each other)."""

import pathlib

import pytest

cli = pytest.importorskip("importlinter.cli")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_import_contracts_are_kept(capsys):
    status = cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True,
                              no_logo=True)
    assert status == 0, capsys.readouterr().out
