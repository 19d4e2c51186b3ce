//! Connection admission for the whole node: Kafka's `max.connections` and
//! `max.connections.per.ip`. Every shard accepts on its own socket (SO_REUSEPORT), so the
//! counts live on shard 0 and the accepting shard asks it (`Op::AdmitConnection`) before it
//! serves a connection and tells it (`Op::ReleaseConnection`) when the connection ends:
//! message passing once per connection, never per request.
//!
//! Invariant: `total` equals the sum of `per_ip`, and no address with a zero count is kept
//! (the map holds at most `max_total` entries, whatever the peers do).

use std::collections::HashMap;
use std::net::IpAddr;

/// Why a connection is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the node holds max_connections ({0}) Kafka connections")]
    Node(usize),
    #[error("{ip} holds max_connections_per_ip ({max}) Kafka connections")]
    PerIp { ip: IpAddr, max: usize },
}

/// The node's open Kafka connections, by peer address.
#[derive(Debug)]
pub struct Admission {
    max_total: usize,
    max_per_ip: usize,
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

impl Admission {
    pub fn new(max_total: usize, max_per_ip: usize) -> Admission {
        Admission {
            max_total,
            max_per_ip,
            total: 0,
            per_ip: HashMap::new(),
        }
    }

    /// Counts a new connection from `ip`, or says why it is refused (nothing counted).
    pub fn admit(&mut self, ip: IpAddr) -> Result<(), Refusal> {
        if self.total >= self.max_total {
            return Err(Refusal::Node(self.max_total));
        }
        let n = self.per_ip.entry(ip).or_insert(0);
        if *n >= self.max_per_ip {
            let max = self.max_per_ip;
            if *n == 0 {
                self.per_ip.remove(&ip);
            }
            return Err(Refusal::PerIp { ip, max });
        }
        *n += 1;
        self.total += 1;
        Ok(())
    }

    /// Uncounts a connection from `ip` that `admit` counted.
    pub fn release(&mut self, ip: IpAddr) {
        if let Some(n) = self.per_ip.get_mut(&ip) {
            *n -= 1;
            self.total -= 1;
            if *n == 0 {
                self.per_ip.remove(&ip);
            }
        }
    }

    /// Open connections counted now.
    #[cfg(test)]
    pub fn total(&self) -> usize {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn per_ip_and_node_limits_refuse_and_free_up_on_release() {
        let mut a = Admission::new(3, 2);
        assert_eq!(a.admit(ip(1)), Ok(()));
        assert_eq!(a.admit(ip(1)), Ok(()));
        assert_eq!(a.admit(ip(1)), Err(Refusal::PerIp { ip: ip(1), max: 2 }));
        assert_eq!(a.admit(ip(2)), Ok(()));
        assert_eq!(a.admit(ip(3)), Err(Refusal::Node(3)));
        a.release(ip(1));
        assert_eq!(a.total(), 2);
        assert_eq!(a.admit(ip(3)), Ok(()));
        for i in [1, 2, 3] {
            a.release(ip(i));
        }
        assert_eq!(a.total(), 0);
        assert!(a.per_ip.is_empty(), "no address with a zero count is kept");
    }

    #[test]
    fn a_release_without_an_admit_changes_nothing() {
        let mut a = Admission::new(1, 1);
        a.release(ip(9));
        assert_eq!(a.total(), 0);
        assert_eq!(a.admit(ip(9)), Ok(()));
    }

    #[test]
    fn a_zero_per_ip_limit_keeps_no_entry_behind() {
        let mut a = Admission::new(5, 0);
        assert!(a.admit(ip(1)).is_err());
        assert!(a.per_ip.is_empty());
    }
}
