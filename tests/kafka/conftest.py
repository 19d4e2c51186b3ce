"""Fixtures for the Kafka client integration tests (STYLE.md section 9).

- `broker`: one `strand` per test module (tests use their own topic names), SIGTERMed at
  module teardown, which asserts exit code 0.
- `strand`: a factory for brokers owned by one test (crash and restart tests); each is
  SIGTERMed at the test's teardown, which asserts exit code 0.
- `strand_harness.need(...)`: a missing client skips the test with the reason, or fails it when
  STRAND_REQUIRE_CLIENTS=1 (CI).

When a test fails, the tail of every broker's stderr that it used is added to the report.
Data dirs of passing runs are removed; those of failing runs are kept under
target/kafka-tests/ and their paths printed.
"""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

from strand_harness import RUN_ROOT, Broker

# Brokers whose logs belong in a failing test's report, keyed by test node id.
_BROKERS_OF_TEST: dict[str, list[Broker]] = {}
_MODULE_BROKERS: dict[str, Broker] = {}


def pytest_sessionstart(session):
    # Data dirs kept by a failing earlier run are removed when the next run starts,
    # except those of a run still going on (named after its pytest process id).
    RUN_ROOT.mkdir(parents=True, exist_ok=True)
    for d in RUN_ROOT.iterdir():
        pid = d.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and os.path.exists(f"/proc/{pid}"):
            continue
        shutil.rmtree(d, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
    if rep.failed:
        brokers = list(_BROKERS_OF_TEST.get(item.nodeid, []))
        mod = _MODULE_BROKERS.get(item.module.__name__ if item.module else "")
        if mod is not None and mod not in brokers:
            brokers.append(mod)
        for b in brokers:
            if not b.root.exists():  # cleaned up by the test: nothing to show
                continue
            rep.sections.append((f"strand stderr ({b.name}, data {b.root})", b.log_tails()))


def _failed(node) -> bool:
    return any(getattr(node, f"rep_{w}", None) is not None and getattr(node, f"rep_{w}").failed
               for w in ("setup", "call"))


@pytest.fixture(scope="module")
def broker(request):
    """A shared broker for one test module: 2 shards, 1 partition per auto-created topic."""
    b = Broker(name=request.module.__name__.replace("test_", ""), smp=2)
    _MODULE_BROKERS[request.module.__name__] = b
    b.start()
    yield b
    rc = b.stop()
    failed = any(_failed(i) for i in request.session.items
                 if i.module is request.module)
    if rc == 0 and not failed:
        b.cleanup()
    else:
        print(f"\nkept data dir of {b.name}: {b.root}")
    assert rc == 0, f"strand exited with {rc} after SIGTERM:\n{b.log_tails()}"


@pytest.fixture
def strand(request):
    """Factory: `strand(name=..., **Broker kwargs)` starts a broker owned by this test."""
    made: list[Broker] = []
    _BROKERS_OF_TEST[request.node.nodeid] = made

    def make(name: str = "b", start: bool = True, **kw) -> Broker:
        b = Broker(name=f"{request.node.name[:40]}-{name}", **kw)
        made.append(b)
        if start:
            b.start()
        return b

    yield make
    bad = []
    for b in made:
        rc = b.stop()
        if rc != 0:
            bad.append(f"{b.name}: strand exited with {rc} after SIGTERM:\n{b.log_tails()}")
    if not bad and not _failed(request.node):
        for b in made:
            b.cleanup()
    else:
        for b in made:
            if b.root.exists():
                print(f"\nkept data dir of {b.name}: {b.root}")
    assert not bad, "\n".join(bad)


@pytest.fixture
def topic(request):
    """A fresh topic name for this test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"
