//! How the value of one declared variable is parsed (the `value_parser`s of the declarations in
//! `super::sections`, `super::declared` and `super::webhook`): trimmed, and for durations a whole
//! number of milliseconds or seconds.

use std::str::FromStr;
use std::time::Duration;

/// `T` parsed from `value` with surrounding whitespace ignored.
pub(super) fn trimmed<T: FromStr>(value: &str) -> Result<T, T::Err> {
    value.trim().parse()
}

/// A whole number of milliseconds.
pub(super) fn millis(value: &str) -> Result<Duration, std::num::ParseIntError> {
    trimmed(value).map(Duration::from_millis)
}

/// A whole number of seconds.
pub(super) fn secs(value: &str) -> Result<Duration, std::num::ParseIntError> {
    trimmed(value).map(Duration::from_secs)
}
