//! The shard's in-flight byte budget: the bytes of requests read and not yet answered, and
//! of answers not yet written to their socket, together at most the shard's
//! `in_flight_bytes_max`. A connection that finds it used up stops reading (backpressure).
//!
//! Invariant: every byte taken is given back exactly once, when its [`Held`] drops or
//! shrinks. Growing never waits past a deadline: answers of one connection are written in
//! request order, so an answer waiting for bytes that later answers of its connection hold
//! would wait for ever; with a deadline it waits at most that long and then makes do (a
//! Fetch answers without records, which the consumer fetches again).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use glommio::sync::Semaphore;

/// The least room a fetch waits for when the shard's in-flight bytes are used up.
pub const FETCH_ROOM_MIN_BYTES: usize = 1024 * 1024;

/// Bytes of the budget held by one request and then its answer.
#[derive(Debug)]
pub struct Held {
    sem: Rc<Semaphore>,
    units: Cell<u64>,
}

impl Held {
    /// Takes `n` bytes of `sem`, waiting for them; `None` when `sem` is closed.
    pub(crate) async fn take(sem: &Rc<Semaphore>, n: usize) -> Option<Held> {
        let units = n as u64;
        sem.acquire(units).await.ok()?;
        Some(Held {
            sem: sem.clone(),
            units: Cell::new(units),
        })
    }

    /// Takes `n` bytes of `sem` if they are free now.
    pub(crate) fn try_take(sem: &Rc<Semaphore>, n: usize) -> Option<Held> {
        let units = n as u64;
        matches!(sem.try_acquire(units), Ok(true)).then(|| Held {
            sem: sem.clone(),
            units: Cell::new(units),
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        usize::try_from(self.units.get()).unwrap_or(usize::MAX)
    }

    /// Gives back whatever is held beyond `n` bytes.
    pub fn shrink_to(&self, n: usize) {
        let keep = n as u64;
        let held = self.units.get();
        if held > keep {
            self.units.set(keep);
            self.sem.signal(held - keep);
        }
    }

    /// Takes `n` more bytes if they are free now; whether it did.
    pub fn try_grow(&self, n: usize) -> bool {
        let units = n as u64;
        let took = matches!(self.sem.try_acquire(units), Ok(true));
        if took {
            self.units.set(self.units.get() + units);
        }
        took
    }

    /// Takes as many more bytes as are free now, up to `n`; how many it took.
    pub fn grow_up_to(&self, n: usize) -> usize {
        let free = usize::try_from(self.sem.available()).unwrap_or(usize::MAX);
        let take = n.min(free);
        if take > 0 && self.try_grow(take) {
            take
        } else {
            0
        }
    }

    /// Takes room for up to `want` bytes of a fetch's records: what is free now, or, with
    /// none free, `FETCH_ROOM_MIN_BYTES` (at most `want`) once it is, waiting until
    /// `deadline` at most. Returns the room taken; 0 means the answer carries no records
    /// (the budget stayed used up for the whole wait).
    pub async fn take_room(&self, want: usize, deadline: Instant) -> usize {
        // A fetch of 0 bytes still gets its first batch (KIP-74): it needs room for one.
        let want = want.max(1);
        let room = self.grow_up_to(want);
        if room > 0 {
            return room;
        }
        let least = want.min(FETCH_ROOM_MIN_BYTES);
        if !self.grow_until(least, deadline).await {
            return 0;
        }
        least + self.grow_up_to(want - least)
    }

    /// Whether `records` bytes read into `room` taken by `take_room` are covered: a first
    /// batch larger than the room (KIP-74) needs the difference too, waited for until
    /// `deadline` at most; uncovered, the answer goes without its records and the consumer
    /// fetches them again.
    pub async fn cover(&self, records: usize, room: usize, deadline: Instant) -> bool {
        records <= room || self.grow_until(records - room, deadline).await
    }

    /// Takes `n` more bytes, waiting for them until `deadline` at most; whether it did.
    pub async fn grow_until(&self, n: usize, deadline: Instant) -> bool {
        if self.try_grow(n) {
            return true;
        }
        let wait = deadline.saturating_duration_since(crate::common::clock::now());
        let units = n as u64;
        match crate::runtime::task::timeout(wait, self.sem.acquire(units)).await {
            Some(Ok(())) => {
                self.units.set(self.units.get() + units);
                true
            }
            _ => false,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let units = self.units.replace(0);
        if units > 0 {
            self.sem.signal(units);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_held_come_back_once_however_they_changed() {
        strand_storage::io_runtime::block_on("budget-test", 1, async {
            let sem = Rc::new(Semaphore::new(100));
            let a = Held::take(&sem, 30).await.expect("open");
            assert_eq!(sem.available(), 70);
            assert!(a.try_grow(50));
            assert!(!a.try_grow(21), "only 20 left");
            assert_eq!(a.grow_up_to(1000), 20);
            assert_eq!((a.bytes(), sem.available()), (100, 0));
            a.shrink_to(10);
            assert_eq!((a.bytes(), sem.available()), (10, 90));
            a.shrink_to(50);
            assert_eq!(a.bytes(), 10, "shrinking never grows");
            assert!(Held::try_take(&sem, 91).is_none());
            let b = Held::try_take(&sem, 90).expect("free");
            // Waiting for more than is free gives up at its deadline, holding what it had.
            let soon = crate::common::clock::now() + std::time::Duration::from_millis(20);
            assert!(!a.grow_until(5, soon).await);
            assert_eq!(a.bytes(), 10);
            drop(b);
            assert!(a.grow_until(5, soon).await);
            drop(a);
            assert_eq!(sem.available(), 100);
        })
        .expect("executor");
    }

    #[test]
    fn a_waiting_grow_is_served_when_bytes_come_back() {
        strand_storage::io_runtime::block_on("budget-test", 1, async {
            let sem = Rc::new(Semaphore::new(10));
            let a = Held::take(&sem, 10).await.expect("open");
            let b = Rc::new(Held::try_take(&sem, 0).expect("zero is always free"));
            let b2 = b.clone();
            let later = crate::common::clock::now() + std::time::Duration::from_secs(10);
            let waiter = glommio::spawn_local(async move { b2.grow_until(8, later).await });
            glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
            a.shrink_to(2);
            assert!(waiter.await);
            assert_eq!((a.bytes(), b.bytes(), sem.available()), (2, 8, 0));
        })
        .expect("executor");
    }
}
