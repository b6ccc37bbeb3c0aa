"""The layers of the code hold: import-linter's contracts of pyproject.toml ([tool.importlinter]:
each layer imports only the ones below it, and the LLVM and CUDA back ends not each other)."""

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("importlinter")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_import_contracts_are_kept():
    # (in a process of its own: import-linter's command closes the streams it writes to)
    command = "from importlinter.cli import lint_imports_command; " \
              "lint_imports_command(['--no-cache'])"
    done = subprocess.run([sys.executable, "-c", command], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
