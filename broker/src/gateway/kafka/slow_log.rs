//! The slow-produce log: a Produce whose answer was ready `produce_slow_log_ms` or more
//! after its frame was read is logged with its timeline — when each step happened, in
//! microseconds from the read — so that a tail can be taken apart (issue 30): the wait
//! for the handler, the hop to the partition's shard, the append, the wait until its
//! flush begins (a flush already in flight finishing first, group commit pacing), the
//! flush itself, and the hop back.
//!
//! Invariant: at most one line per shard per `SLOW_LOG_INTERVAL` (the others are counted
//! in the next line's `suppressed`); nothing is computed unless the request was slow.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::common::logging::RateLimit;
use crate::partition::AppendTiming;
use crate::shard::ops::ProduceResult;

/// Least time between two slow-produce lines of one shard.
pub const SLOW_LOG_INTERVAL: Duration = Duration::from_secs(1);

thread_local! {
    static SLOW_LOG: RateLimit = RateLimit::new(SLOW_LOG_INTERVAL);
}

/// The connection's side of a produce's timeline.
#[derive(Clone, Copy, Debug)]
pub struct Stamps {
    /// The request's frame was read.
    pub received: Instant,
    /// Its handler began (after the connection's queue and any throttle).
    pub handler_started: Instant,
    /// Every partition had answered (the response could be built).
    pub parts_done: Instant,
}

/// Logs the request at WARN when it took `threshold_ms` or more (0: never), with the
/// timeline of its slowest partition. `parts` lists (topic, partition, shard, result); it
/// is called only for a slow request the rate limit lets through.
pub fn check<'a>(
    threshold_ms: u64,
    stamps: Stamps,
    acks: i16,
    client_id: &str,
    parts: impl FnOnce() -> Vec<Part<'a>>,
) {
    if threshold_ms == 0 {
        return;
    }
    let took = stamps.parts_done.saturating_duration_since(stamps.received);
    if took < Duration::from_millis(threshold_ms) {
        return;
    }
    let Some(suppressed) = SLOW_LOG.with(|l| l.allow(stamps.parts_done)) else {
        return;
    };
    let parts = parts();
    let timeline = timeline(stamps, &parts);
    tracing::warn!(
        took_ms = took.as_secs_f64() * 1e3,
        threshold_ms,
        acks,
        client_id,
        partitions = parts.len(),
        suppressed,
        "slow produce; timeline in µs from the request's read: {timeline}"
    );
}

/// One partition of a produce: topic, partition, the shard that owns it, its result.
pub type Part<'a> = (&'a str, i32, Option<usize>, &'a ProduceResult);

/// The timeline as text: the handler's start, then the slowest partition's steps (the
/// one whose last step came latest), then when every partition had answered.
pub fn timeline(stamps: Stamps, parts: &[Part<'_>]) -> String {
    let us = |t: Instant| t.saturating_duration_since(stamps.received).as_micros();
    let mut out = format!("handler {}", us(stamps.handler_started));
    let slowest = parts
        .iter()
        .filter_map(|(topic, p, shard, r)| r.timing.map(|t| (topic, p, shard, t)))
        .max_by_key(|(_, _, _, t)| t.durable.unwrap_or(t.appended));
    if let Some((topic, p, shard, t)) = slowest {
        let AppendTiming {
            started,
            appended,
            flush_started,
            durable,
            replicated,
        } = t;
        let on = shard.map_or_else(|| "?".to_string(), |s| s.to_string());
        let step = if replicated {
            "answered by its Raft group"
        } else {
            "appended"
        };
        let _ = write!(
            out,
            ", {topic}-{p} on shard {on}: began {}, {step} {}",
            us(started),
            us(appended)
        );
        if let Some(f) = flush_started {
            let waited = f.saturating_duration_since(appended).as_micros();
            let _ = write!(
                out,
                ", its flush began {} ({waited} after the append)",
                us(f)
            );
        }
        if let Some(d) = durable {
            let disk = flush_started.map_or(0, |f| d.saturating_duration_since(f).as_micros());
            let _ = write!(out, ", durable {} (flush {disk})", us(d));
        }
    } else if !parts.is_empty() {
        out.push_str(", no partition timeline (a duplicate or refused)");
    }
    let _ = write!(out, ", all partitions answered {}", us(stamps.parts_done));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use strand_storage::KafkaOffset;

    fn result(timing: Option<AppendTiming>) -> ProduceResult {
        ProduceResult {
            error: None,
            base_offset: KafkaOffset(0),
            log_start_offset: KafkaOffset(0),
            timing,
            log_append_time_ms: -1,
        }
    }

    #[test]
    fn the_timeline_names_each_step_of_the_slowest_partition_in_microseconds() {
        let t0 = crate::common::clock::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        let stamps = Stamps {
            received: t0,
            handler_started: at(12),
            parts_done: at(9_000),
        };
        let fast = result(Some(AppendTiming {
            started: at(20),
            appended: at(30),
            flush_started: Some(at(40)),
            durable: Some(at(300)),
            replicated: false,
        }));
        let slow = result(Some(AppendTiming {
            started: at(25),
            appended: at(31),
            flush_started: Some(at(2_000)),
            durable: Some(at(8_900)),
            replicated: false,
        }));
        let parts = [("a", 0, Some(0), &fast), ("b", 3, Some(1), &slow)];
        assert_eq!(
            timeline(stamps, &parts),
            "handler 12, b-3 on shard 1: began 25, appended 31, its flush began 2000 \
             (1969 after the append), durable 8900 (flush 6900), all partitions answered 9000"
        );
    }

    #[test]
    fn acks_one_and_untraced_partitions_say_what_they_have() {
        let t0 = crate::common::clock::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        let stamps = Stamps {
            received: t0,
            handler_started: at(5),
            parts_done: at(50),
        };
        let acks1 = result(Some(AppendTiming {
            started: at(10),
            appended: at(20),
            flush_started: None,
            durable: None,
            replicated: false,
        }));
        assert_eq!(
            timeline(stamps, &[("t", 0, None, &acks1)]),
            "handler 5, t-0 on shard ?: began 10, appended 20, all partitions answered 50"
        );
        let raft = result(Some(AppendTiming {
            started: at(10),
            appended: at(40),
            flush_started: None,
            durable: None,
            replicated: true,
        }));
        assert_eq!(
            timeline(stamps, &[("t", 1, Some(1), &raft)]),
            "handler 5, t-1 on shard 1: began 10, answered by its Raft group 40, \
             all partitions answered 50"
        );
        let untraced = result(None);
        assert_eq!(
            timeline(stamps, &[("t", 0, Some(0), &untraced)]),
            "handler 5, no partition timeline (a duplicate or refused), all partitions answered 50"
        );
    }

    #[test]
    fn nothing_is_logged_below_the_threshold_or_when_off() {
        // `check` returns before the rate limit when the request was fast or the log is
        // off: the limit is still open for the slow request after them.
        let t0 = crate::common::clock::now();
        let fast = Stamps {
            received: t0,
            handler_started: t0,
            parts_done: t0 + Duration::from_millis(1),
        };
        check(5, fast, -1, "c", || panic!("parts asked of a fast request"));
        check(0, fast, -1, "c", || panic!("parts asked with the log off"));
        assert_eq!(
            SLOW_LOG.with(|l| l.allow(t0 + Duration::from_millis(1))),
            Some(0)
        );
    }
}
