//! Client quotas (KIP-13, KIP-55, KIP-124, KIP-546) as Kafka resolves and measures them:
//! an entity is a user and/or a client id, each named or the default; the quota that
//! applies to a connection is the most specific entity holding that quota key (Kafka's
//! eight-step precedence in `resolve`), and usage is measured over `window_num` samples of
//! `window_ms` (Kafka's `quota.window.num`, `quota.window.size.seconds`), shared by every
//! connection the matched entity covers. A client over its quota is throttled for
//! `(rate - quota) / quota * window`, as Kafka's ClientQuotaManager computes it.
//!
//! Invariant: rates are per second; a throttle time is never negative and never longer than the whole window.

use std::collections::BTreeMap;

/// Bytes per second a producer may append (`producer_byte_rate`).
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
/// Bytes per second a consumer may fetch (`consumer_byte_rate`).
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// Percent of one thread's time a client's requests may take (`request_percentage`,
/// KIP-124; 200 is two threads' worth).
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
/// The quota keys Strand enforces (Kafka's `controller_mutation_rate` is not:
/// AlterClientQuotas refuses it).
pub const KEYS: [&str; 3] = [PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE];
/// Percent-seconds one nanosecond of a thread's time counts for (Kafka's
/// `nanosToPercentagePerSecond`): recorded per request, their rate per second is the
/// share of one thread in percent.
pub const PERCENT_SECONDS_PER_NANO: f64 = 100.0 / 1e9;
/// Kafka's entity type names.
pub const USER: &str = "user";
/// Kafka's entity type names.
pub const CLIENT_ID: &str = "client-id";

/// A quota entity: `user` and `client_id` are absent (`None`), the default (`Some(None)`)
/// or a name.
#[derive(
    Clone,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct QuotaEntity {
    /// The user part.
    pub user: Option<Option<String>>,
    /// The client-id part.
    pub client_id: Option<Option<String>>,
}

/// A quota's value (f64 with the equality of its bits, so commands can compare it).
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct QuotaValue(pub f64);

impl PartialEq for QuotaValue {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for QuotaValue {}

/// Every entity's quotas, by key.
pub type Quotas = BTreeMap<QuotaEntity, BTreeMap<String, QuotaValue>>;

/// Who a usage counter belongs to: the matched entity with its defaults made the
/// connection's names (a default quota applies to each user or client on its own).
pub type UsageKey = (Option<String>, Option<String>);

/// The quota `key` of a connection of `user` with `client_id`, and whose usage it counts
/// against, if any entity sets it (Kafka's precedence: user+client, user+default client,
/// user, default user+client, default user+default client, default user, client, default
/// client).
pub fn resolve(quotas: &Quotas, user: &str, client_id: &str, key: &str) -> Option<(UsageKey, f64)> {
    let named = |s: &str| Some(Some(s.to_string()));
    let candidates = [
        (named(user), named(client_id)),
        (named(user), Some(None)),
        (named(user), None),
        (Some(None), named(client_id)),
        (Some(None), Some(None)),
        (Some(None), None),
        (None, named(client_id)),
        (None, Some(None)),
    ];
    candidates.into_iter().find_map(|(u, c)| {
        let entity = QuotaEntity {
            user: u,
            client_id: c,
        };
        let value = quotas.get(&entity)?.get(key)?.0;
        let owner = (
            entity.user.as_ref().map(|_| user.to_string()),
            entity.client_id.as_ref().map(|_| client_id.to_string()),
        );
        Some((owner, value))
    })
}

/// A rate over the last `num` samples of `window_ms` each (Kafka's SampledStat).
#[derive(Clone, Debug)]
pub struct Rate {
    window_ms: u64,
    /// (start of the sample's window in ms, value recorded in it), oldest first.
    samples: std::collections::VecDeque<(u64, f64)>,
    num: usize,
}

impl Rate {
    /// An empty rate over `num` windows of `window_ms`.
    pub fn new(num: usize, window_ms: u64) -> Rate {
        Rate {
            window_ms: window_ms.max(1),
            samples: std::collections::VecDeque::with_capacity(num.max(2)),
            num: num.max(2),
        }
    }

    fn expire(&mut self, now_ms: u64) {
        let span = self.window_ms * self.num as u64;
        while self
            .samples
            .front()
            .is_some_and(|(start, _)| start + span <= now_ms)
        {
            self.samples.pop_front();
        }
    }

    /// Adds `value` at `now_ms` (a negative value takes back what was recorded).
    pub fn record(&mut self, now_ms: u64, value: f64) {
        self.expire(now_ms);
        let start = now_ms - now_ms % self.window_ms;
        match self.samples.back_mut() {
            Some((s, v)) if *s == start => *v += value,
            _ => {
                if self.samples.len() == self.num {
                    self.samples.pop_front();
                }
                self.samples.push_back((start, value));
            }
        }
    }

    /// The span the rate divides by: from the oldest sample to now, at least all but one
    /// window (Kafka's `windowSize`), in ms.
    fn span_ms(&self, now_ms: u64) -> u64 {
        let oldest = self.samples.front().map_or(now_ms, |(s, _)| *s);
        now_ms
            .saturating_sub(oldest)
            .max(self.window_ms * (self.num as u64 - 1))
    }

    /// Whether every sample has left the window (nothing recorded within it).
    pub fn is_idle(&mut self, now_ms: u64) -> bool {
        self.expire(now_ms);
        self.samples.is_empty()
    }

    /// Recorded value per second.
    pub fn per_second(&mut self, now_ms: u64) -> f64 {
        self.expire(now_ms);
        let total: f64 = self.samples.iter().map(|(_, v)| v).sum();
        total * 1000.0 / self.span_ms(now_ms) as f64
    }

    /// How long a client at this rate must wait to be back at `quota` (per second), in ms.
    pub fn throttle_ms(&mut self, now_ms: u64, quota: f64) -> u64 {
        let rate = self.per_second(now_ms);
        if quota <= 0.0 || rate <= quota {
            return 0;
        }
        let ms = (rate - quota) / quota * self.span_ms(now_ms) as f64;
        (ms as u64).min(self.window_ms * self.num as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(user: Option<Option<&str>>, client: Option<Option<&str>>) -> QuotaEntity {
        QuotaEntity {
            user: user.map(|u| u.map(str::to_string)),
            client_id: client.map(|c| c.map(str::to_string)),
        }
    }

    fn set(q: &mut Quotas, e: QuotaEntity, v: f64) {
        q.entry(e)
            .or_default()
            .insert(PRODUCER_BYTE_RATE.into(), QuotaValue(v));
    }

    #[test]
    fn the_most_specific_entity_wins_in_kafkas_order() {
        let mut q = Quotas::new();
        let r = |q: &Quotas, u: &str, c: &str| resolve(q, u, c, PRODUCER_BYTE_RATE);
        assert_eq!(r(&q, "alice", "app"), None);
        set(&mut q, entity(None, Some(None)), 8.0);
        assert_eq!(
            r(&q, "alice", "app"),
            Some(((None, Some("app".into())), 8.0))
        );
        set(&mut q, entity(None, Some(Some("app"))), 7.0);
        assert_eq!(r(&q, "alice", "app").map(|x| x.1), Some(7.0));
        set(&mut q, entity(Some(None), None), 6.0);
        assert_eq!(
            r(&q, "alice", "app"),
            Some(((Some("alice".into()), None), 6.0))
        );
        set(&mut q, entity(Some(None), Some(None)), 5.0);
        set(&mut q, entity(Some(None), Some(Some("app"))), 4.0);
        set(&mut q, entity(Some(Some("alice")), None), 3.0);
        assert_eq!(
            r(&q, "alice", "app"),
            Some(((Some("alice".into()), None), 3.0))
        );
        assert_eq!(r(&q, "bob", "app").map(|x| x.1), Some(4.0));
        set(&mut q, entity(Some(Some("alice")), Some(None)), 2.0);
        set(&mut q, entity(Some(Some("alice")), Some(Some("app"))), 1.0);
        assert_eq!(
            r(&q, "alice", "app"),
            Some(((Some("alice".into()), Some("app".into())), 1.0))
        );
        assert_eq!(r(&q, "alice", "other").map(|x| x.1), Some(2.0));
        assert_eq!(resolve(&q, "alice", "app", CONSUMER_BYTE_RATE), None);
    }

    #[test]
    fn the_rate_spans_the_window_and_throttles_as_kafka() {
        let mut r = Rate::new(11, 1000);
        // 10 000 bytes in the first second: rate over the 10 s minimum span.
        r.record(500, 10_000.0);
        assert!((r.per_second(900) - 1000.0).abs() < 1e-9);
        assert_eq!(r.throttle_ms(900, 1000.0), 0);
        // Twice the quota: throttled for as long again as the span.
        r.record(900, 10_000.0);
        assert!((r.per_second(900) - 2000.0).abs() < 1e-9);
        assert_eq!(r.throttle_ms(900, 1000.0), 10_000);
        // Never longer than the whole window.
        r.record(950, 1e9);
        assert_eq!(r.throttle_ms(950, 1.0), 11_000);
        // Unrecording takes it back; old samples expire.
        r.record(960, -1e9);
        assert!((r.per_second(960) - 2000.0).abs() < 1e-6);
        assert_eq!(r.per_second(20_000), 0.0);
        assert!(r.is_idle(20_000));
    }
}
