"""Shared test set-up: this folder is on sys.path, so tests in sub-folders import ``jitcheck``
and ``randomgraphs``, and so is every folder of tests (they mirror myelin's packages), so a
test imports another folder's module by name whichever was collected first (the CUDA
emulation reuses the CPU kernels' test tables); myelin's caches (compiled code, tuning
answers) go to a temporary directory of this process, removed at exit, never to the user's
cache."""

import atexit
import os
import pathlib
import shutil
import sys
import tempfile

for _folder in sorted({path.parent for path in pathlib.Path(__file__).parent.rglob("*.py")}):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))

os.environ["MYELIN_CACHE_DIR"] = tempfile.mkdtemp(prefix="myelin-test-cache-")
atexit.register(shutil.rmtree, os.environ["MYELIN_CACHE_DIR"], ignore_errors=True)
