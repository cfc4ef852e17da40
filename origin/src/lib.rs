//! Flashgate origin (skeleton being written).
pub mod redlock;
