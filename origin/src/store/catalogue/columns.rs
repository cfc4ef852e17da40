//! The catalogue's mapping between the wire and the `skus` columns: the query parameters of an
//! admin PUT's schedule fields ([`ScheduleParams`]) and the row every catalogue query returns
//! ([`SkuRow`]), from which the SKU view is built (in one place: `From<SkuRow> for SkuView`).
//!
//! Each optional setting is a "keep" flag and its new columns: keep the stored columns (the body
//! did not name the field), or write the new ones (all null: the setting is off).

use chrono::{DateTime, Utc};
use shared::{
    NetworkLimits, PowAlgorithm, ProofOfWork, ScheduleUpdate, SkuView, Timestamp, Update,
    WaitingRoom,
};

/// A stored instant as the wire's [`Timestamp`]. Stored instants came from a `Timestamp`, so
/// they are within its range; anything else (a hand-edited row) reads as no instant.
pub(crate) fn timestamp(at: Option<DateTime<Utc>>) -> Option<Timestamp> {
    at.and_then(|at| Timestamp::from_unix_ms(at.timestamp_millis()))
}

fn instant(at: Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(at.unix_ms())
}

/// An [`Update`] as whether to keep the stored value and the new columns (`off` when cleared).
fn keep_or<T, C>(update: Update<T>, off: C, columns: impl FnOnce(T) -> C) -> (bool, C) {
    match update {
        Update::Keep => (true, off),
        Update::Clear => (false, off),
        Update::Set(value) => (false, columns(value)),
    }
}

/// A `u32` setting as an `integer` column. The wire bounds every one far below `i32::MAX`.
fn integer(n: u32) -> Option<i32> {
    i32::try_from(n).ok()
}

/// The query parameters of a PUT's schedule fields (see the module docs).
pub(super) struct ScheduleParams {
    pub(super) keep_starts: bool,
    pub(super) starts_at: Option<DateTime<Utc>>,
    pub(super) keep_ends: bool,
    pub(super) ends_at: Option<DateTime<Utc>>,
    /// `None` keeps the stored value.
    pub(super) paused: Option<bool>,
    pub(super) keep_room: bool,
    /// `room_admit_per_minute`, `room_pass_secs`, `room_overbook_hundredths`.
    pub(super) room: (Option<i32>, Option<i32>, Option<i32>),
    pub(super) keep_pow: bool,
    /// `pow_min_bits`, `pow_max_bits`, `pow_algorithm` (null for v1, the default).
    pub(super) pow: (Option<i16>, Option<i16>, Option<&'static str>),
    pub(super) keep_net: bool,
    /// `net_admissions`, `net_units`, `net_window_secs`.
    pub(super) net: (Option<i32>, Option<i32>, Option<i32>),
}

impl ScheduleParams {
    pub(super) fn new(change: &ScheduleUpdate) -> Self {
        let (keep_starts, starts_at) = keep_or(change.starts_at, None, instant);
        let (keep_ends, ends_at) = keep_or(change.ends_at, None, instant);
        let (keep_room, room) =
            keep_or(change.waiting_room, (None, None, None), |r: WaitingRoom| {
                (
                    integer(r.admit_per_minute),
                    integer(r.pass_secs),
                    Some(i32::from(r.overbook.hundredths())),
                )
            });
        let (keep_pow, pow) = keep_or(
            change.proof_of_work,
            (None, None, None),
            |p: ProofOfWork| {
                (
                    Some(i16::from(p.min_bits)),
                    Some(i16::from(p.max_bits)),
                    (p.algorithm != PowAlgorithm::default()).then_some(p.algorithm.as_str()),
                )
            },
        );
        let (keep_net, net) = keep_or(
            change.network_limits,
            (None, None, None),
            |n: NetworkLimits| {
                (
                    n.admissions.and_then(integer),
                    n.units.and_then(integer),
                    integer(n.window_secs),
                )
            },
        );
        Self {
            keep_starts,
            starts_at,
            keep_ends,
            ends_at,
            paused: change.paused,
            keep_room,
            room,
            keep_pow,
            pow,
            keep_net,
            net,
        }
    }
}

/// A `skus` row as every catalogue query returns it.
pub(super) struct SkuRow {
    pub(super) sku: String,
    pub(super) name: String,
    pub(super) price_cents: i64,
    pub(super) stock: i64,
    pub(super) max_per_user: i32,
    pub(super) starts_at: Option<DateTime<Utc>>,
    pub(super) ends_at: Option<DateTime<Utc>>,
    pub(super) paused: bool,
    pub(super) room_admit_per_minute: Option<i32>,
    pub(super) room_pass_secs: Option<i32>,
    pub(super) room_overbook_hundredths: Option<i32>,
    pub(super) pow_min_bits: Option<i16>,
    pub(super) pow_max_bits: Option<i16>,
    pub(super) pow_algorithm: Option<String>,
    pub(super) net_admissions: Option<i32>,
    pub(super) net_units: Option<i32>,
    pub(super) net_window_secs: Option<i32>,
    pub(super) generation: i64,
    pub(super) returns: i64,
    /// Units in held orders of the current generation.
    pub(super) held: i64,
}

impl From<SkuRow> for SkuView {
    fn from(r: SkuRow) -> Self {
        Self {
            sku: r.sku,
            name: r.name,
            price_cents: r.price_cents,
            stock: r.stock,
            held: r.held,
            max_per_user: r.max_per_user,
            starts_at: timestamp(r.starts_at),
            ends_at: timestamp(r.ends_at),
            paused: r.paused,
            waiting_room: WaitingRoom::from_columns(
                r.room_admit_per_minute,
                r.room_pass_secs,
                r.room_overbook_hundredths,
            ),
            proof_of_work: ProofOfWork::from_columns(
                r.pow_min_bits,
                r.pow_max_bits,
                r.pow_algorithm.as_deref(),
            ),
            network_limits: NetworkLimits::from_columns(
                r.net_admissions,
                r.net_units,
                r.net_window_secs,
            ),
        }
    }
}
