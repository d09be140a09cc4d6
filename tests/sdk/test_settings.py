"""Settings that need a real process: the default run directory and `import openruns`. The
layering and the checks of each value are in tests/unit/test_settings.py."""

from __future__ import annotations

import os
import subprocess
import sys

from openruns.settings import DEFAULT_DIR


def test_the_default_run_directory_cannot_shadow_the_package(tmp_path):
    # An offline run in the working directory, then an interpreter that does not have openruns
    # installed looks for it there: the directory must not be importable as the package.
    subprocess.run(
        [sys.executable, "-c", "import openruns; openruns.init(kind='eval').finish()"],
        cwd=tmp_path,
        check=True,
        env={**os.environ, "OPENRUNS_CONFIG_FILE": str(tmp_path / "none.toml")},
    )
    assert (tmp_path / DEFAULT_DIR).is_dir()
    # -S: no site-packages, so the installed package is out of sight; with -c the working
    # directory comes first on sys.path, as for any script run there.
    probe = subprocess.run(
        [sys.executable, "-S", "-c", "import importlib.util as u; print(u.find_spec('openruns'))"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "None"
