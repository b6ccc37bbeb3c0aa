"""Shared test set-up: this folder is on sys.path, so tests in sub-folders import ``jitcheck``
and ``randomgraphs``; myelin's caches (compiled code, tuning answers) go to a temporary
directory of this process, removed at exit, never to the user's cache."""

import atexit
import os
import shutil
import tempfile

os.environ["MYELIN_CACHE_DIR"] = tempfile.mkdtemp(prefix="myelin-test-cache-")
atexit.register(shutil.rmtree, os.environ["MYELIN_CACHE_DIR"], ignore_errors=True)
