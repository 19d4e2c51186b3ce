//! The queues between shards: one bounded channel per shard, and each shard's sending end
//! of every other shard's channel ([`PeerQueue`]).
//!
//! Invariant: a queue holds at most `depth` messages, whatever the number of tasks that
//! send on it. futures' mpsc gives every `Sender` clone one guaranteed slot beyond its
//! buffer, so cloning a sender per message (as calls once did) made the bound grow with
//! the number of concurrent callers. Here the senders are made once at start-up (one per
//! shard plus the wiring's own, counted into the buffer by [`channels`]) and never cloned
//! afterwards; the tasks of a shard take turns on its one sender ([`PeerQueue::send`]).

use std::cell::RefCell;

use futures::channel::mpsc;

/// Senders of every queue that exist for the life of the process: each shard's, the
/// wiring's own (used at shutdown), and the one shutdown clones for a moment.
fn permanent_senders(shards: usize) -> usize {
    shards + 2
}

/// `shards` queues of at most `depth` messages each (see the module doc): every shard's
/// sending ends (the wiring's, to hand out once per shard) and receiving ends.
pub fn channels<T>(shards: usize, depth: usize) -> (Vec<mpsc::Sender<T>>, Vec<mpsc::Receiver<T>>) {
    let buffer = depth.saturating_sub(permanent_senders(shards));
    (0..shards).map(|_| mpsc::channel::<T>(buffer)).unzip()
}

/// A shard's sending end of another shard's queue. `!Send`: it lives on its shard.
pub struct PeerQueue<T> {
    tx: RefCell<mpsc::Sender<T>>,
    /// One task at a time waits for room: the sender keeps only the last waiter's waker.
    turn: glommio::sync::Semaphore,
}

impl<T> PeerQueue<T> {
    /// The sending end `tx` (this shard's own clone, made once at start-up).
    pub fn new(tx: mpsc::Sender<T>) -> PeerQueue<T> {
        PeerQueue {
            tx: RefCell::new(tx),
            turn: glommio::sync::Semaphore::new(1),
        }
    }

    /// Queues `msg`, waiting (in turn with this shard's other senders) for room. `Err`
    /// gives `msg` back when the receiving shard has stopped.
    pub async fn send(&self, msg: T) -> Result<(), T> {
        let Ok(_turn) = self.turn.acquire_permit(1).await else {
            return Err(msg);
        };
        // The borrow lasts one poll, never across an await. Once ready, the sender is not
        // parked and `try_send` queues the message (it fails only when disconnected).
        let ready = std::future::poll_fn(|cx| self.tx.borrow_mut().poll_ready(cx)).await;
        if ready.is_err() {
            return Err(msg);
        }
        self.tx
            .borrow_mut()
            .try_send(msg)
            .map_err(mpsc::TrySendError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;

    /// Many tasks sending on one queue that nobody drains fill it to its depth and no
    /// further; draining lets the waiting senders go on, in order.
    #[test]
    fn depth_holds_whatever_the_number_of_senders() {
        strand_storage::io_runtime::block_on("queue-test", 1, async {
            const DEPTH: usize = 16;
            const SENDERS: usize = 200;
            let (senders, mut receivers) = channels::<usize>(2, DEPTH);
            // Shard 0's and shard 1's ends of shard 1's queue, as start-up makes them.
            let q0 = Rc::new(PeerQueue::new(senders[1].clone()));
            let _q1 = PeerQueue::new(senders[1].clone());
            let rx = &mut receivers[1];
            let sent = Rc::new(std::cell::Cell::new(0usize));
            for i in 0..SENDERS {
                let (q, sent) = (q0.clone(), sent.clone());
                glommio::spawn_local(async move {
                    q.send(i).await.expect("queue open");
                    sent.set(sent.get() + 1);
                })
                .detach();
            }
            glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
            let queued = sent.get();
            assert!(queued <= DEPTH, "{queued} queued, depth {DEPTH}");
            assert!(queued >= DEPTH - permanent_senders(2), "{queued} queued");
            let mut got = Vec::new();
            while got.len() < SENDERS {
                match rx.try_recv() {
                    Ok(v) => got.push(v),
                    _ => glommio::timer::sleep(std::time::Duration::from_millis(1)).await,
                }
            }
            assert_eq!(
                got,
                (0..SENDERS).collect::<Vec<_>>(),
                "senders kept their turns"
            );
        })
        .expect("executor");
    }

    /// A stopped receiver gives the message back instead of waiting forever.
    #[test]
    fn send_to_a_stopped_shard_returns_the_message() {
        strand_storage::io_runtime::block_on("queue-test", 1, async {
            let (senders, receivers) = channels::<u8>(1, 8);
            let q = PeerQueue::new(senders[0].clone());
            drop(receivers);
            assert_eq!(q.send(7).await, Err(7));
        })
        .expect("executor");
    }
}
