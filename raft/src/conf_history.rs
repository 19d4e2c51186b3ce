//! `ConfHistory`: a group's configuration as of its compaction point, and after each
//! configuration entry applied since. A snapshot ships the configuration *at its point*:
//! the receiver applies the configuration entries after the point on top of it. Shipping
//! the current configuration instead breaks when a joint change straddles the point (the
//! receiver holds the simple configuration the leader left the joint one for, then applies
//! "leave joint" again: raft-rs refuses it and the group was fenced on the receiver; found
//! by the storage simulator, seed 1185).
//!
//! Invariants: `changes` is ordered by index, every index above the point; `at_point`
//! is the configuration that holds at the compaction point, `None` when unknown (a store
//! persisted before the history was kept), until a recorded change reaches the point.

use raft::eraftpb::ConfState;

use crate::types::RaftIndex;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfHistory {
    at_point: Option<ConfState>,
    changes: Vec<(RaftIndex, ConfState)>,
}

impl ConfHistory {
    /// A history whose configuration at the point is `at_point` (a new group: its first
    /// configuration; a restored snapshot: the one it carried), with no change since.
    pub fn at(at_point: ConfState) -> Self {
        Self {
            at_point: Some(at_point),
            changes: Vec::new(),
        }
    }

    /// A history read back from a store: `at_point` (`None` when unknown) and the changes
    /// since the point, in any order (sorted here; one per index, the last kept).
    pub fn from_parts(at_point: Option<ConfState>, changes: Vec<(RaftIndex, ConfState)>) -> Self {
        let by_index: std::collections::BTreeMap<_, _> = changes.into_iter().collect();
        Self {
            at_point,
            changes: by_index.into_iter().collect(),
        }
    }

    /// The configuration at the compaction point, if known.
    pub fn at_point(&self) -> Option<&ConfState> {
        self.at_point.as_ref()
    }

    /// The changes since the point: (index of the configuration entry, configuration after it).
    pub fn changes(&self) -> &[(RaftIndex, ConfState)] {
        &self.changes
    }

    /// The configuration entry at `index` was applied and gave `conf`. Applying again
    /// after a restart records the same index again: what was recorded at or after it is
    /// replaced.
    pub fn record(&mut self, index: RaftIndex, conf: &ConfState) {
        self.changes.retain(|&(i, _)| i < index);
        self.changes.push((index, conf.clone()));
    }

    /// The compaction point moved to `through`: the changes at or before it fold into the
    /// configuration at the point.
    pub fn compact(&mut self, through: RaftIndex) {
        let folded = self.changes.partition_point(|&(i, _)| i <= through);
        if let Some((_, conf)) = self.changes.drain(..folded).next_back() {
            self.at_point = Some(conf);
        }
    }

    /// A snapshot was installed: the log starts after its point, with `conf` at it.
    pub fn restore(&mut self, conf: &ConfState) {
        *self = Self::at(conf.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voters(v: &[u64]) -> ConfState {
        ConfState {
            voters: v.to_vec(),
            ..ConfState::default()
        }
    }

    #[test]
    fn compaction_folds_the_changes_it_passes() {
        let mut h = ConfHistory::at(voters(&[1, 2, 3]));
        h.record(RaftIndex(5), &voters(&[1, 2, 3, 4]));
        h.record(RaftIndex(9), &voters(&[2, 3, 4]));
        h.compact(RaftIndex(4));
        assert_eq!(h.at_point(), Some(&voters(&[1, 2, 3])));
        h.compact(RaftIndex(7));
        assert_eq!(h.at_point(), Some(&voters(&[1, 2, 3, 4])));
        assert_eq!(h.changes(), &[(RaftIndex(9), voters(&[2, 3, 4]))]);
        h.compact(RaftIndex(9));
        assert_eq!(h.at_point(), Some(&voters(&[2, 3, 4])));
        assert!(h.changes().is_empty());
    }

    #[test]
    fn applying_again_replaces_what_followed() {
        let mut h = ConfHistory::at(voters(&[1]));
        h.record(RaftIndex(3), &voters(&[1, 2]));
        h.record(RaftIndex(6), &voters(&[1, 2, 3]));
        h.record(RaftIndex(3), &voters(&[1, 2]));
        assert_eq!(h.changes(), &[(RaftIndex(3), voters(&[1, 2]))]);
    }

    #[test]
    fn an_unknown_point_becomes_known_once_a_change_reaches_it() {
        let mut h = ConfHistory::from_parts(None, vec![(RaftIndex(8), voters(&[1, 2]))]);
        h.compact(RaftIndex(7));
        assert_eq!(h.at_point(), None);
        h.compact(RaftIndex(8));
        assert_eq!(h.at_point(), Some(&voters(&[1, 2])));
    }

    #[test]
    fn parts_are_sorted_and_one_per_index() {
        let h = ConfHistory::from_parts(
            Some(voters(&[1])),
            vec![
                (RaftIndex(9), voters(&[3])),
                (RaftIndex(4), voters(&[2])),
                (RaftIndex(9), voters(&[4])),
            ],
        );
        assert_eq!(
            h.changes(),
            &[(RaftIndex(4), voters(&[2])), (RaftIndex(9), voters(&[4]))]
        );
    }
}
