//! Forwards raft-rs's `slog` records to `tracing` (STYLE.md 11), so elections and leader
//! changes reach the broker's logs with the group and node as fields.
//!
//! Invariant: a record is formatted only when `tracing` has its level enabled; raft-rs logs
//! at debug on every message, which must cost no more than a level check when disabled.

use std::fmt::{self, Write as _};

use slog::{Drain, Key, Level, OwnedKVList, Record, Serializer, KV};

use crate::types::{GroupId, NodeId};

/// The `slog::Drain` behind every group's raft-rs logger.
struct TracingDrain;

/// Collects slog key-value pairs as ` key=value` text.
struct KvText(String);

impl Serializer for KvText {
    fn emit_arguments(&mut self, key: Key, val: &fmt::Arguments<'_>) -> slog::Result {
        // Writing to a String cannot fail.
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

fn enabled(level: Level) -> bool {
    match level {
        Level::Critical | Level::Error => tracing::enabled!(target: "raft", tracing::Level::ERROR),
        Level::Warning => tracing::enabled!(target: "raft", tracing::Level::WARN),
        Level::Info => tracing::enabled!(target: "raft", tracing::Level::INFO),
        Level::Debug => tracing::enabled!(target: "raft", tracing::Level::DEBUG),
        Level::Trace => tracing::enabled!(target: "raft", tracing::Level::TRACE),
    }
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        if !enabled(record.level()) {
            return Ok(());
        }
        let mut kv = KvText(String::new());
        // Serializing into a String cannot fail.
        let _ = values.serialize(record, &mut kv);
        let _ = record.kv().serialize(record, &mut kv);
        let (msg, kv) = (record.msg(), kv.0);
        match record.level() {
            Level::Critical | Level::Error => tracing::error!(target: "raft", "{msg}{kv}"),
            Level::Warning => tracing::warn!(target: "raft", "{msg}{kv}"),
            Level::Info => tracing::info!(target: "raft", "{msg}{kv}"),
            Level::Debug => tracing::debug!(target: "raft", "{msg}{kv}"),
            Level::Trace => tracing::trace!(target: "raft", "{msg}{kv}"),
        }
        Ok(())
    }
}

/// The raft-rs logger of `group` on `node`.
pub fn logger(node: NodeId, group: GroupId) -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!("node" => node.0, "group" => group.0))
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn records_reach_tracing_with_their_fields() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let log = logger(NodeId(1), GroupId(7));
            slog::info!(log, "became leader"; "term" => 3);
            slog::debug!(log, "filtered out");
        });
        let text =
            String::from_utf8(captured.0.lock().expect("not poisoned").clone()).expect("utf-8");
        for piece in ["became leader", "term=3", "group=7", "node=1"] {
            assert!(text.contains(piece), "{piece:?} missing from {text:?}");
        }
        assert!(!text.contains("filtered out"));
    }
}
