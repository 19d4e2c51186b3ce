//! Runtime modules.

pub mod crash;
pub mod preflight;
pub mod probe;
pub mod signals;
