//! Protocol gateways.

pub mod kafka;
pub mod native;
