"""Shared fixtures: a scratch working directory per test, and the project's test programs (the
fake NVML, the `gpu-tracker` command) found through environment variables or built with cargo."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def scratch(tmp_path, monkeypatch):
    """Every test runs in its own empty directory, so that files it leaves behind are seen."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv('GPU_TRACKER_MARK', raising=False)
    return tmp_path


def _target_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get('CARGO_TARGET_DIR', ROOT / 'target'))


def _built(env_var: str, name: str, cargo_args: list) -> pathlib.Path:
    given = os.environ.get(env_var)
    if given:
        return pathlib.Path(given)
    path = _target_dir() / 'debug' / name
    subprocess.run(['cargo', 'build', '--quiet', *cargo_args], cwd=ROOT, check=True)
    assert path.is_file(), path
    return path


@pytest.fixture(scope='session')
def fake_nvml() -> pathlib.Path:
    """The project's fake libnvidia-ml.so.1 (tests/fake-nvml); GPU_TRACKER_TEST_NVML names a
    prebuilt one."""
    return _built('GPU_TRACKER_TEST_NVML', 'libnvidia_ml.so', ['-p', 'fake-nvml'])


@pytest.fixture(scope='session')
def gpu_tracker_bin() -> pathlib.Path:
    """The `gpu-tracker` command; GPU_TRACKER_TEST_BIN names a prebuilt one."""
    return _built('GPU_TRACKER_TEST_BIN', 'gpu-tracker', ['--bin', 'gpu-tracker'])


def run_python(code: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter of this environment; fails the test on a non-zero exit."""
    full_env = dict(os.environ, **(env or {}))
    p = subprocess.run([sys.executable, '-c', code], env=full_env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p
