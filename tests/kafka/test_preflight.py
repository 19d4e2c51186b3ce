"""Start-up refuses, with the fix in the message, what it cannot run on: a data directory
without O_DIRECT (tmpfs), too little locked memory, a Kafka port another process listens on."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from strand_harness import free_port, strand_bin


def run_strand(args, timeout=20, preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(strand_bin()), *args], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=preexec)


def base_args(data_dir) -> list[str]:
    return ["--data-dir", str(data_dir), "--kafka-addr", f"127.0.0.1:{free_port()}",
            "--admin-addr", f"127.0.0.1:{free_port()}", "--smp", "1",
            "--native-addr", f"127.0.0.1:{free_port()}", "--native-shard-base-port", "0"]


def test_tmpfs_data_dir_is_refused_unless_buffered_io_is_allowed(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm tmpfs on this machine")
    d = Path(tempfile.mkdtemp(dir=shm))
    try:
        r = run_strand(base_args(d))
        assert r.returncode == 1, r.stderr
        assert "O_DIRECT" in r.stderr and "--allow-buffered-io" in r.stderr, r.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_memlock_too_low_is_refused_with_the_fix(tmp_path):
    import resource

    def low_memlock():
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 * 1024, 64 * 1024))

    r = run_strand(base_args(tmp_path / "data"), preexec=low_memlock)
    assert r.returncode == 1, r.stderr
    assert "RLIMIT_MEMLOCK" in r.stderr and "ulimit -l" in r.stderr, r.stderr


def test_kafka_port_in_use_is_refused_with_the_fix(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        args = ["--data-dir", str(tmp_path / "data"), "--kafka-addr", f"127.0.0.1:{port}",
                "--admin-addr", f"127.0.0.1:{free_port()}", "--smp", "1",
                "--native-addr", f"127.0.0.1:{free_port()}", "--native-shard-base-port", "0"]
        r = run_strand(args)
        assert r.returncode == 1, r.stderr
        assert f"127.0.0.1:{port}" in r.stderr and "--kafka-addr" in r.stderr, r.stderr
    finally:
        s.close()


def test_bad_config_file_is_refused_naming_the_key(tmp_path):
    cfg = tmp_path / "strand.toml"
    cfg.write_text("no_such_key = 1\n")
    r = run_strand(base_args(tmp_path / "data") + ["--config", str(cfg)])
    assert r.returncode == 1
    assert "no_such_key" in r.stderr, r.stderr
