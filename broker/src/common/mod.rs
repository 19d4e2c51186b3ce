//! Foundation modules.

pub mod clock;
pub mod config;
pub mod errors;
pub mod logging;
pub mod metrics;
