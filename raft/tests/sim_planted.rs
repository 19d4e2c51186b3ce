//! The simulator can fail: planted bugs it must report (raft/src/sim). Kept apart from
//! `sim.rs` because the raft-rs panics they provoke are noisy under `--nocapture`.

use strand_raft::sim::{self, SimConfig};
use strand_raft::SyncBehaviour;

/// The simulator can fail: a store that acknowledges fsync without persisting loses
/// acknowledged writes, and some seed must report it.
#[test]
fn checker_catches_a_store_that_lies_about_fsync() {
    let config = SimConfig {
        sync_behaviour: SyncBehaviour::LiesAboutSync,
        ..SimConfig::default()
    };
    let failures: Vec<String> = (0..20)
        .filter_map(|seed| sim::run(seed, &config).err())
        .map(|f| f.to_string())
        .collect();
    eprintln!("lying store: {} of 20 seeds failed", failures.len());
    for f in &failures {
        eprintln!("  {f}");
    }
    assert!(
        failures.iter().any(|f| f.contains("lost write")),
        "no seed reported a lost write; failures: {failures:?}"
    );
}

/// Without the durability check, what a client sees still exposes the lying store: an
/// acknowledged write missing at the end, a committed entry changed, or two leaders in a
/// term (a forgotten vote).
#[test]
fn client_visible_checks_catch_a_store_that_lies_about_fsync() {
    let config = SimConfig {
        sync_behaviour: SyncBehaviour::LiesAboutSync,
        check_durable: false,
        ..SimConfig::default()
    };
    let failures: Vec<String> = (0..40)
        .filter_map(|seed| sim::run(seed, &config).err())
        .map(|f| f.to_string())
        .collect();
    eprintln!(
        "lying store, durability check off: {} of 40 seeds failed",
        failures.len()
    );
    for f in &failures {
        eprintln!("  {f}");
    }
    assert!(
        failures
            .iter()
            .any(|f| f.contains("lost write") || f.contains("changed")),
        "no seed reported a lost or changed write; failures: {failures:?}"
    );
}
