//! The order in which one producer's transactional batches reach a partition's sequence
//! check. A Kafka connection's requests run concurrently on a shard, while Kafka handles
//! them one at a time; a transactional batch awaits its coordinator (KIP-890) before its
//! append, so without this a batch sent later could be verified first, land first (an
//! unknown producer's first batch may start at any sequence) and leave the producer's
//! earlier batch out of order for good.
//!
//! Invariant: per producer id a partition has at most one tail turn; a turn waits only for
//! the turn taken just before it, and ends (waking the next) once its batch passed the
//! sequence check and was recorded, or failed. A turn that ended without its batch recorded
//! passes on its epoch and lowest sequence: a later batch of that epoch with a higher
//! sequence is refused as out of order (Kafka's verification-state rule; clients retry a
//! batch refused so while an earlier one is unresolved), so it never lands before the batch
//! the producer will retry.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use futures::channel::oneshot;

use crate::common::errors::KafkaError;

/// How a turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Its batch was recorded (or was a duplicate of one that is).
    Passed,
    /// Its batch was not recorded: later batches of `epoch` above `first_seq` must wait
    /// for the producer's retry of it.
    Failed { epoch: i16, first_seq: i32 },
}

/// Per producer id, the newest turn's id and what it will say when it ends.
type Tails = Rc<RefCell<HashMap<i64, (u64, oneshot::Receiver<Outcome>)>>>;

/// The turns of one partition's producers.
#[derive(Default)]
pub struct Turns {
    tails: Tails,
    next_id: Cell<u64>,
}

impl Turns {
    /// Takes the next turn of `producer_id` for its batch of `epoch` starting at
    /// `first_seq`. Taken when the batch arrives (no await before), in arrival order.
    pub fn take(&self, producer_id: i64, epoch: i16, first_seq: i32) -> Turn {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let (tx, rx) = oneshot::channel();
        let before = self
            .tails
            .borrow_mut()
            .insert(producer_id, (id, rx))
            .map(|(_, before)| before);
        Turn {
            producer_id,
            id,
            before,
            done: Some(tx),
            epoch,
            lowest_seq: first_seq,
            passed: false,
            tails: self.tails.clone(),
        }
    }

    /// Producers with a turn taken and not ended (for tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.tails.borrow().len()
    }
}

/// One batch's place in its producer's order at a partition. Dropped without `pass`, it
/// ends as failed.
pub struct Turn {
    producer_id: i64,
    id: u64,
    before: Option<oneshot::Receiver<Outcome>>,
    done: Option<oneshot::Sender<Outcome>>,
    /// The batch's epoch.
    epoch: i16,
    /// Its first sequence, or a failed earlier batch's lower one it was refused for.
    lowest_seq: i32,
    /// The batch was recorded.
    passed: bool,
    tails: Tails,
}

impl Turn {
    /// Waits until the batch before this one (same producer) has ended. Refuses this batch
    /// as out of order when an earlier batch of its epoch with a lower sequence failed.
    pub async fn wait(&mut self) -> Result<(), KafkaError> {
        let Some(before) = self.before.take() else {
            return Ok(());
        };
        // A turn dropped without `pass` (its request failed, or went away with its
        // connection) says failed: the producer retries that batch first.
        if let Ok(Outcome::Failed { epoch, first_seq }) = before.await {
            if epoch == self.epoch && first_seq < self.lowest_seq {
                self.lowest_seq = first_seq;
                return Err(KafkaError::OutOfOrderSequence);
            }
        }
        Ok(())
    }

    /// The batch was recorded: the next batch may go on.
    pub fn pass(mut self) {
        self.passed = true;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let outcome = if self.passed {
            Outcome::Passed
        } else {
            Outcome::Failed {
                epoch: self.epoch,
                first_seq: self.lowest_seq,
            }
        };
        if let Some(tx) = self.done.take() {
            let _ = tx.send(outcome);
        }
        let mut tails = self.tails.borrow_mut();
        if tails
            .get(&self.producer_id)
            .is_some_and(|(id, _)| *id == self.id)
        {
            tails.remove(&self.producer_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn the_first_turn_goes_at_once_and_leaves_nothing_behind() {
        let turns = Turns::default();
        let mut t = turns.take(7, 0, 0);
        assert_eq!(t.wait().now_or_never(), Some(Ok(())));
        t.pass();
        assert_eq!(turns.waiting(), 0);
    }

    #[test]
    fn a_later_turn_waits_for_the_earlier_one() {
        let turns = Turns::default();
        let first = turns.take(7, 0, 0);
        let mut second = turns.take(7, 0, 3);
        // Another producer is not held up.
        let mut other = turns.take(8, 0, 5);
        assert_eq!(other.wait().now_or_never(), Some(Ok(())));
        let mut waiting = Box::pin(async move {
            let r = second.wait().await;
            second.pass();
            r
        });
        assert!((&mut waiting).now_or_never().is_none());
        first.pass();
        assert_eq!(waiting.now_or_never(), Some(Ok(())));
        other.pass();
        assert_eq!(turns.waiting(), 0);
    }

    #[test]
    fn a_higher_sequence_after_a_failed_batch_is_out_of_order_and_passes_that_on() {
        let turns = Turns::default();
        let first = turns.take(7, 0, 0);
        let mut second = turns.take(7, 0, 3);
        let mut third = turns.take(7, 0, 6);
        drop(first); // failed: its batch was not recorded
        assert_eq!(
            second.wait().now_or_never(),
            Some(Err(KafkaError::OutOfOrderSequence))
        );
        drop(second);
        assert_eq!(
            third.wait().now_or_never(),
            Some(Err(KafkaError::OutOfOrderSequence))
        );
        drop(third);
        // The producer's retry of the first batch goes on.
        let mut retry = turns.take(7, 0, 0);
        assert_eq!(retry.wait().now_or_never(), Some(Ok(())));
        retry.pass();
        assert_eq!(turns.waiting(), 0);
    }

    #[test]
    fn a_failed_batch_of_an_older_epoch_or_a_lower_sequence_holds_nothing_back() {
        let turns = Turns::default();
        let old = turns.take(7, 0, 4);
        let mut new_epoch = turns.take(7, 1, 0);
        let mut lower = turns.take(7, 1, 0);
        drop(old);
        assert_eq!(new_epoch.wait().now_or_never(), Some(Ok(())));
        drop(new_epoch); // failed at sequence 0 of epoch 1
        assert_eq!(lower.wait().now_or_never(), Some(Ok(())));
        lower.pass();
    }
}
