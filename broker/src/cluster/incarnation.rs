//! A node's incarnation: a random number kept in `<data_dir>/incarnation`, drawn when the
//! data directory is first used by a cluster node, so a wiped (or replaced) data directory
//! comes back under a new one. The node registers it with the controller, which records
//! each replica's incarnation when it creates a partition (`Topic::origin_incarnations`).
//!
//! What it decides: a replica whose Raft group opens blank under the incarnation its
//! partition was created with has never written anything of that group (its data
//! directory has been there since before the group existed), so it cannot have
//! acknowledged entries it lost, and it votes like the new replica it is. Under another
//! incarnation it may have, and it keeps raft's blank-replica guard (raft/src/group.rs).
//! Without this, a new partition whose leader died before it reached one follower stayed
//! leaderless until that leader came back: the blank follower refused the other one.
//!
//! Assumed: a data directory is wiped or replaced whole, never one partition's files alone
//! (its file goes with the rest).
//!
//! Invariant: the number is durable in the data directory before the node registers it,
//! and it is never 0 (0 is "unknown": an older node, or a record from before this).

use std::path::Path;

use anyhow::{bail, Context};

/// The file under the data directory holding the node's incarnation.
pub const INCARNATION_FILE: &str = "incarnation";

/// The incarnation kept in `data_dir`, drawn and written durably when there is none.
pub fn load_or_create(data_dir: &Path) -> anyhow::Result<u64> {
    let path = data_dir.join(INCARNATION_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => match u64::from_str_radix(text.trim(), 16) {
            Ok(n) if n != 0 => Ok(n),
            _ => bail!(
                "{} must hold the node's incarnation (hex digits, not 0); it holds {:?}. \
                 Remove it only with the rest of the data directory",
                path.display(),
                text.trim()
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(data_dir)
                .with_context(|| format!("creating {}", data_dir.display()))?;
            let n = drawn();
            strand_storage::io::write_small_file_atomic_blocking(
                &path,
                format!("{n:016x}\n").as_bytes(),
            )
            .with_context(|| format!("writing {}", path.display()))?;
            tracing::info!(incarnation = %format!("{n:016x}"), "new data directory: incarnation drawn");
            Ok(n)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// A random nonzero number.
fn drawn() -> u64 {
    let n = uuid::Uuid::new_v4().as_u64_pair().0;
    n.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_incarnation_is_drawn_once_kept_and_new_for_a_new_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = load_or_create(dir.path()).expect("drawn");
        assert_ne!(first, 0);
        assert_eq!(load_or_create(dir.path()).expect("kept"), first);
        let other = tempfile::tempdir().expect("tempdir");
        assert_ne!(load_or_create(other.path()).expect("drawn"), first);
        std::fs::write(dir.path().join(INCARNATION_FILE), "0\n").expect("write");
        assert!(load_or_create(dir.path()).is_err(), "0 is refused");
        std::fs::write(dir.path().join(INCARNATION_FILE), "garbage\n").expect("write");
        assert!(load_or_create(dir.path()).is_err(), "garbage is refused");
    }
}
