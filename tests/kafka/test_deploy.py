"""deploy/: the systemd unit passes `systemd-analyze verify` (when the tool is installed),
and `make install` into a DESTDIR installs binaries, unit, sysusers entry and config, and
keeps an operator's edited config on a second install."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from strand_harness import REPO_ROOT, need, strand_bin

UNIT = REPO_ROOT / "deploy" / "strand.service"


def test_systemd_unit_verifies(tmp_path):
    tool = shutil.which("systemd-analyze")
    need(tool is not None, "systemd-analyze is not installed: cannot verify deploy/strand.service")
    # verify checks that ExecStart= exists: point it at the binary under test.
    unit = tmp_path / "strand.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/strand", str(strand_bin())))
    r = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "strand.service" not in r.stderr, r.stdout + r.stderr
    text = UNIT.read_text()
    for line in ("LimitMEMLOCK=infinity", "LimitNOFILE=1048576", "Restart=on-failure",
                 "ExecStart=/usr/local/bin/strand --config /etc/strand/strand.toml",
                 "User=strand", "StateDirectory=strand"):
        assert line in text.splitlines(), line


def test_make_install_into_destdir_keeps_an_existing_config(tmp_path):
    need(shutil.which("make") is not None, "make is not installed")
    bins = tmp_path / "bin"
    bins.mkdir()
    shutil.copy(strand_bin(), bins / "strand")
    # strand-bench is installed as built; a stand-in keeps this test from building it.
    (bins / "strand-bench").write_text("#!/bin/sh\n")
    os.chmod(bins / "strand-bench", 0o755)
    dest = tmp_path / "root"

    def install():
        return subprocess.run(["make", "-s", "-C", str(REPO_ROOT), "install",
                               f"DESTDIR={dest}", f"BIN_DIR={bins}"],
                              capture_output=True, text=True, timeout=120)

    r = install()
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.access(dest / "usr/local/bin/strand", os.X_OK)
    assert (dest / "usr/local/bin/strand-bench").exists()
    assert (dest / "lib/systemd/system/strand.service").read_text() == UNIT.read_text()
    assert (dest / "usr/lib/sysusers.d/strand.conf").exists()
    cfg = dest / "etc/strand/strand.toml"
    assert cfg.read_text() == (REPO_ROOT / "deploy/strand.toml").read_text()
    cfg.write_text("node_id = 7\n")
    r = install()
    assert r.returncode == 0, r.stdout + r.stderr
    assert cfg.read_text() == "node_id = 7\n", "an existing config is never overwritten"
    assert (dest / "etc/strand/strand.toml.default").exists()
