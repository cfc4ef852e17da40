//! Admission: how many members of a room are admitted at an instant, which ones, when, and what
//! a member is told. The coordinator object publishes a [`RoomState`] every [`TICK_MS`]
//! ([`RoomState::advance`] then [`RoomState::with_window`]); workers cache it and answer polls
//! from it ([`RoomState::status`]).
//!
//! **Rate.** From the base instant `t_base`, with `carry` (the progress toward the next slot, in
//! admissions·ms, `0..60_000`), `floor((carry + rate × (now − t_base)) / 60_000)` more slots are
//! admitted — one every `60 s / rate`, never a burst — but never more than the window holds
//! (the members known to be waiting). When the window runs dry, the progress is dropped (no
//! credit banks up while nobody waits), so admissions stay at least `60 s / rate` apart: in any
//! interval of `d` ms at most `1 + floor(rate × d / 60_000)` are admitted.
//!
//! **Order.** The window lists, slot by slot, the shard of the next members in the total order
//! (`super::order::Key`): the merge of every shard's next members. A member of shard `s` with
//! rank `r` in its shard is admitted once `r` is below the shard's base plus the slots of `s`
//! already admitted in the window: exact, however many shards there are. Members that joined
//! within [`HORIZON_MS`] of a tick are left for the next one, so nobody who joined earlier can
//! be overtaken by a later joiner of another shard.

use super::order::{Head, merge};
use crate::shield::SkuFacts;

/// The version tag of [`RoomState::encode`] (`s1`: before the room knew the stock; still read).
const STATE_TAG: &str = "s2";
const STATE_TAG_V1: &str = "s1";

/// How often the coordinator publishes a new state.
pub const TICK_MS: i64 = 1_000;
/// Members who joined less than this before a tick wait for the next one (clock skew and
/// joins in flight); admission also begins this long after `starts_at`, once every pre-queue
/// join has landed.
pub const HORIZON_MS: i64 = 1_000;
/// Most slots a window holds (caps the published state at about 4 KB of window).
pub const MAX_WINDOW: usize = 4_096;
const MINUTE_MS: u64 = 60_000;
const DIGITS: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";

/// The room's setting, as the worker passes it from the SKU view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoomConfig {
    pub admit_per_minute: u32,
    pub pass_secs: u32,
    /// `starts_at` of the sale (unix ms), if any: joins before it are the pre-queue.
    pub starts_ms: Option<i64>,
    /// Passes outstanding per unit remaining, in hundredths (`shared::Overbook`).
    pub overbook: u16,
}

impl RoomConfig {
    /// The room of a sale as its facts show it: `None` without one (or before a view told).
    pub fn of(facts: &SkuFacts) -> Option<Self> {
        let room = facts.room?.waiting_room?;
        Some(Self {
            admit_per_minute: room.admit_per_minute,
            pass_secs: room.pass_secs,
            starts_ms: facts
                .schedule
                .and_then(|s| s.starts_at)
                .map(|t| t.unix_ms()),
            overbook: room.overbook_hundredths,
        })
    }

    /// The setting as the origin's view shows it now (the coordinator reads the view on its
    /// tick): its rate, pass and overbook, with this `starts_ms`.
    #[must_use]
    pub fn with_room(self, room: &shared::WaitingRoom) -> Self {
        Self {
            admit_per_minute: room.admit_per_minute,
            pass_secs: room.pass_secs,
            overbook: room.overbook.hundredths(),
            ..self
        }
    }

    /// `rate;pass_secs;starts_ms|-;overbook` (compact text, like [`RoomState::encode`]).
    pub fn encode(&self) -> String {
        format!(
            "{};{};{};{}",
            self.admit_per_minute,
            self.pass_secs,
            self.starts_ms
                .map_or_else(|| "-".to_owned(), |s| s.to_string()),
            self.overbook
        )
    }

    /// The text of [`RoomConfig::encode`] (also without the overbook, as stored before it: the
    /// default).
    pub fn decode(text: &str) -> Option<Self> {
        let f: Vec<&str> = text.split(';').collect();
        if f.len() != 3 && f.len() != 4 {
            return None;
        }
        Some(Self {
            admit_per_minute: f[0].parse().ok()?,
            pass_secs: f[1].parse().ok()?,
            starts_ms: if f[2] == "-" {
                None
            } else {
                Some(f[2].parse().ok()?)
            },
            overbook: match f.get(3) {
                Some(o) => o.parse().ok()?,
                None => shared::Overbook::DEFAULT.hundredths(),
            },
        })
    }
}

/// The sale's stock as the origin's SKU view showed it at a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stock {
    /// Units remaining (`stock`).
    pub remaining: u64,
    /// Units in held orders, which come back if their holds expire (`held`).
    pub held: u64,
}

/// Whether a join at `join_ms` is in the pre-queue (before the start).
pub fn is_pre(join_ms: i64, starts_ms: Option<i64>) -> bool {
    starts_ms.is_some_and(|s| join_ms < s)
}

/// The published admission state of one room. On the wire (the coordinator's answer, the Cache
/// API, the coordinator's storage) as the compact text of [`RoomState::encode`], not JSON: one
/// parser less in the Worker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RoomState {
    /// Admissions per minute in force.
    pub rate: u32,
    pub pass_secs: u32,
    pub starts_ms: Option<i64>,
    /// Admission has begun (`starts_at` + [`HORIZON_MS`] passed, or no `starts_at`).
    pub open: bool,
    /// The base instant (unix ms) and admitted count there.
    pub t_base: i64,
    pub a_base: u64,
    /// Progress toward the next slot at `t_base`, admissions·ms (`0..60_000`).
    pub carry: u64,
    /// The shard of each next slot, one base-32 digit per slot.
    pub window: String,
    /// Per shard: how many of its members were admitted at `t_base`.
    pub shard_base: Vec<u64>,
    /// Per shard: how many joined (at the last pull).
    pub shard_joined: Vec<u64>,
    pub joined: u64,
    pub pre_joined: u64,
    /// Admissions per minute measured over the last minute while people waited (0: not yet).
    pub measured_per_minute: u32,
    /// Passes outstanding per unit remaining, in hundredths.
    pub overbook: u16,
    /// Units remaining as the origin's view last showed them; none: not read yet (nobody is
    /// admitted before the room knows the stock).
    pub remaining: Option<u64>,
    /// Units in held orders at the last read: they may come back (`may_return`).
    pub held: u64,
    /// Passes outstanding at `t_base` (admitted, neither used nor expired), the tick's
    /// admissions included.
    pub outstanding: u64,
    /// Per shard: how many of its members are settled (numbered: ranks `0..n` have a place).
    pub shard_settled: Vec<u64>,
    /// Members numbered in all (places `0..placed` are given).
    pub placed: u64,
}

/// What a poll knows of a member (its receipt, or its shard's record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seat {
    pub shard: u32,
    /// Rank in its shard (none: a pre-queue member before the draw).
    pub rank: Option<u64>,
    pub pre: bool,
    pub admitted_ms: Option<i64>,
    /// Index in the room's total order, once numbered (the exact place).
    pub place: Option<u64>,
    /// The shard was asked already for this answer: do not ask again.
    pub asked: bool,
}

/// What a member is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Before the start: the place is drawn at the start, among `line` pre-queue members.
    PreQueue { line: u64 },
    /// `position` in line (1 = next; exact within the window, an estimate beyond it).
    Waiting { position: u64, next_ms: Option<i64> },
    /// Admitted at `admitted_ms`.
    Admitted { admitted_ms: i64 },
    /// Admitted before this state's base: the member's shard knows when.
    AdmittedEarlier,
    /// No unit remains: nobody is admitted. `position` is still the member's place, for when
    /// units come back; `may_return`: holds are outstanding that could expire and return units.
    SoldOut { position: u64, may_return: bool },
    /// A pre-queue member whose rank the shard has not given out yet: ask the shard.
    Unranked,
    /// A settled member whose receipt has no place yet: its shard has it (once per member).
    Unplaced,
}

fn digit(shard: u32) -> char {
    DIGITS.get(shard as usize).map_or('?', |&b| char::from(b))
}

fn shard_of_digit(c: u8) -> Option<usize> {
    DIGITS.iter().position(|&d| d == c)
}

fn csv(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

impl RoomState {
    /// `s2;rate;pass_secs;starts_ms|-;open;t_base;a_base;carry;window;shard_base,…;shard_joined,…;joined;pre_joined;measured;overbook;remaining|-;held;outstanding;shard_settled,…;placed`.
    pub fn encode(&self) -> String {
        format!(
            "{STATE_TAG};{};{};{};{};{};{};{};{};{};{};{};{};{};{};{};{};{};{};{}",
            self.rate,
            self.pass_secs,
            self.starts_ms
                .map_or_else(|| "-".to_owned(), |s| s.to_string()),
            u8::from(self.open),
            self.t_base,
            self.a_base,
            self.carry,
            self.window,
            csv(&self.shard_base),
            csv(&self.shard_joined),
            self.joined,
            self.pre_joined,
            self.measured_per_minute,
            self.overbook,
            self.remaining
                .map_or_else(|| "-".to_owned(), |r| r.to_string()),
            self.held,
            self.outstanding,
            csv(&self.shard_settled),
            self.placed,
        )
    }

    /// The state of [`RoomState::encode`]'s text, if it is one.
    pub fn decode(text: &str) -> Option<Self> {
        let f: Vec<&str> = text.split(';').collect();
        let v1 = f.len() == 14 && f[0] == STATE_TAG_V1;
        if !v1 && (f.len() != 20 || f[0] != STATE_TAG) {
            return None;
        }
        let list = |s: &str| -> Option<Vec<u64>> {
            if s.is_empty() {
                return Some(Vec::new());
            }
            s.split(',').map(|n| n.parse().ok()).collect()
        };
        Some(Self {
            rate: f[1].parse().ok()?,
            pass_secs: f[2].parse().ok()?,
            starts_ms: if f[3] == "-" {
                None
            } else {
                Some(f[3].parse().ok()?)
            },
            open: f[4] == "1",
            t_base: f[5].parse().ok()?,
            a_base: f[6].parse().ok()?,
            carry: f[7].parse().ok()?,
            window: f[8].to_owned(),
            shard_base: list(f[9])?,
            shard_joined: list(f[10])?,
            joined: f[11].parse().ok()?,
            pre_joined: f[12].parse().ok()?,
            measured_per_minute: f[13].parse().ok()?,
            overbook: if v1 {
                shared::Overbook::DEFAULT.hundredths()
            } else {
                f[14].parse().ok()?
            },
            remaining: match f.get(15) {
                None | Some(&"-") => None,
                Some(r) => Some(r.parse().ok()?),
            },
            held: f.get(16).map_or(Some(0), |h| h.parse().ok())?,
            outstanding: f.get(17).map_or(Some(0), |o| o.parse().ok())?,
            shard_settled: f.get(18).map_or(Some(Vec::new()), |l| list(l))?,
            placed: f.get(19).map_or(Some(0), |p| p.parse().ok())?,
        })
    }

    /// The state of a room nobody has run yet.
    pub fn new(config: RoomConfig, shards: u32, now: i64) -> Self {
        Self {
            rate: config.admit_per_minute,
            pass_secs: config.pass_secs,
            starts_ms: config.starts_ms,
            overbook: config.overbook,
            t_base: now,
            shard_base: vec![0; shards as usize],
            shard_joined: vec![0; shards as usize],
            shard_settled: vec![0; shards as usize],
            ..Self::default()
        }
    }

    fn window_len(&self) -> u64 {
        self.window.len() as u64
    }

    /// Slots admitted since `t_base` if the window were endless.
    fn elapsed_slots(&self, now: i64) -> u64 {
        if !self.open || self.rate == 0 {
            return 0;
        }
        let ms = u64::try_from(now.saturating_sub(self.t_base)).unwrap_or(0);
        (self.carry + u64::from(self.rate).saturating_mul(ms)) / MINUTE_MS
    }

    /// Whether at `now` the window has run dry (everyone known to wait is admitted): the
    /// admission rate was not the limit, so it is no measurement of it.
    pub fn drained(&self, now: i64) -> bool {
        self.open && self.elapsed_slots(now) >= self.window_len()
    }

    /// Members admitted in all at `now` (per this state).
    pub fn admitted(&self, now: i64) -> u64 {
        self.a_base + self.elapsed_slots(now).min(self.window_len())
    }

    /// The instant slot `k` (`k >= a_base`) is admitted.
    pub fn slot_ms(&self, k: u64) -> i64 {
        let need = (k - self.a_base + 1) * MINUTE_MS - self.carry;
        let ms = need.div_ceil(u64::from(self.rate.max(1)));
        self.t_base + i64::try_from(ms).unwrap_or(i64::MAX / 2)
    }

    /// What the member of `shard` with `rank` (none: not known yet), who joined in the pre-queue
    /// or not, is told at `now`. `admitted_ms`: when the shard recorded its admission, if known.
    pub fn status(
        &self,
        shard: u32,
        rank: Option<u64>,
        pre: bool,
        admitted_ms: Option<i64>,
        now: i64,
    ) -> Status {
        self.status_of(
            &Seat {
                shard,
                rank,
                pre,
                admitted_ms,
                place: None,
                asked: true,
            },
            now,
        )
    }

    /// What `seat` is told at `now`.
    pub fn status_of(&self, seat: &Seat, now: i64) -> Status {
        match self.place(seat, now) {
            Status::Waiting { position, .. } | Status::PreQueue { line: position }
                if self.sold_out() =>
            {
                Status::SoldOut {
                    position,
                    may_return: self.may_return(),
                }
            }
            status => status,
        }
    }

    /// No unit remains (as the origin's view last showed it).
    pub fn sold_out(&self) -> bool {
        self.remaining == Some(0)
    }

    /// Units may come back: holds are outstanding that could expire.
    pub fn may_return(&self) -> bool {
        self.held > 0
    }

    /// How many more passes the stock allows at `t_base`: `floor(remaining × overbook)` less
    /// those outstanding (0 until the stock is known).
    pub fn allowance(&self) -> u64 {
        self.remaining.map_or(0, |r| {
            shared::Overbook::from_hundredths(self.overbook)
                .unwrap_or_default()
                .passes_for(r)
                .saturating_sub(self.outstanding)
        })
    }

    /// Whether a member at `position` lies beyond what the stock and the overbook can admit
    /// from `now` on, if no unit comes back and no pass expires unused.
    pub fn likely_sold_out(&self, position: u64, now: i64) -> bool {
        let since_base = self.admitted(now) - self.a_base;
        self.remaining.is_some() && position > self.allowance().saturating_sub(since_base)
    }

    /// The stock, not the rate, decides the next few seconds' admissions: shoppers in line
    /// should poll often, to learn a sell-out at once.
    pub fn stock_bound(&self) -> bool {
        self.remaining.is_some() && self.allowance() <= self.window_target() as u64
    }

    fn place(&self, seat: &Seat, now: i64) -> Status {
        if let Some(admitted_ms) = seat.admitted_ms {
            return Status::Admitted { admitted_ms };
        }
        let s = seat.shard as usize;
        let base = self.shard_base.get(s).copied().unwrap_or(0);
        let Some(rank) = seat.rank else {
            return if self.open {
                Status::Unranked
            } else {
                Status::PreQueue {
                    line: self.pre_joined.max(1),
                }
            };
        };
        if !self.open && seat.pre {
            return Status::PreQueue {
                line: self.pre_joined.max(1),
            };
        }
        if let Some(place) = seat.place {
            return self.by_place(place, now);
        }
        if rank < base {
            return Status::AdmittedEarlier;
        }
        let settled = self.shard_settled.get(s).copied();
        if settled.is_some_and(|n| rank < n) && !seat.asked {
            return Status::Unplaced;
        }
        let admitted = self.admitted(now);
        let mut seen = base;
        for (j, &c) in self.window.as_bytes().iter().enumerate() {
            if shard_of_digit(c) == Some(s) {
                if seen == rank {
                    let k = self.a_base + j as u64;
                    return if k < admitted {
                        Status::Admitted {
                            admitted_ms: self.slot_ms(k),
                        }
                    } else {
                        Status::Waiting {
                            position: k - admitted + 1,
                            next_ms: self.open.then(|| self.slot_ms(k)),
                        }
                    };
                }
                seen += 1;
            }
        }
        // Not numbered yet: joined within the last second or so (not settled), or a shard that
        // missed its numbers. Settled members not yet admitted are all ahead; of those not
        // settled, every one the shards reported is counted as ahead (an upper bound of what
        // was known at the tick).
        if let Some(settled) = settled.filter(|&n| rank >= n) {
            let unsettled: u64 = self
                .shard_joined
                .iter()
                .zip(&self.shard_settled)
                .enumerate()
                .filter(|&(j, _)| j != s)
                .map(|(_, (joined, settled))| joined.saturating_sub(*settled))
                .sum();
            return Status::Waiting {
                position: self.placed.saturating_sub(admitted) + unsettled + (rank - settled) + 1,
                next_ms: None,
            };
        }
        Status::Waiting {
            position: self.position_beyond_window(s, rank - seen, admitted),
            next_ms: None,
        }
    }

    /// The status of the member numbered `place` in the room's total order: admitted once
    /// the admitted count passes it; else exactly `place − admitted + 1`-th in line.
    fn by_place(&self, place: u64, now: i64) -> Status {
        let admitted = self.admitted(now);
        if place < admitted {
            return if place >= self.a_base {
                Status::Admitted {
                    admitted_ms: self.slot_ms(place),
                }
            } else {
                Status::AdmittedEarlier
            };
        }
        Status::Waiting {
            position: place - admitted + 1,
            next_ms: (self.open && place < self.a_base + self.window_len())
                .then(|| self.slot_ms(place)),
        }
    }

    /// Estimated place of a member with `ahead` members of its own shard between it and the
    /// window: the rest of the window, then the others spread like the shards' queues.
    fn position_beyond_window(&self, shard: usize, ahead: u64, admitted: u64) -> u64 {
        let mut in_window = vec![0u64; self.shard_base.len()];
        for &c in self.window.as_bytes() {
            if let Some(s) = shard_of_digit(c).filter(|&s| s < in_window.len()) {
                in_window[s] += 1;
            }
        }
        let beyond = |s: usize| {
            self.shard_joined
                .get(s)
                .copied()
                .unwrap_or(0)
                .saturating_sub(self.shard_base.get(s).copied().unwrap_or(0) + in_window[s])
        };
        let total: u64 = (0..in_window.len()).map(beyond).sum();
        let mine = beyond(shard).max(ahead + 1);
        let spread = u128::from(ahead) * u128::from(total.max(mine)) / u128::from(mine);
        let rest_of_window = (self.a_base + self.window_len()).saturating_sub(admitted);
        rest_of_window + 1 + u64::try_from(spread).unwrap_or(u64::MAX / 2)
    }

    /// Seconds a member at `position` may expect to wait, from the measured admission rate (the
    /// setting until there is a measurement).
    pub fn wait_secs(&self, position: u64) -> u64 {
        let rate = if self.measured_per_minute > 0 {
            self.measured_per_minute
        } else {
            self.rate.max(1)
        };
        (position * 60).div_ceil(u64::from(rate))
    }

    /// The tick at `now` with `config` (the setting may have changed): the slots admitted since
    /// the base join the shards' bases. Returns the new state, without a window yet, and per
    /// shard the admissions to record there (rank, instant).
    pub fn advance(&self, config: RoomConfig, now: i64) -> (Self, Vec<Vec<(u64, i64)>>) {
        let shards = self.shard_base.len();
        let mut admissions = vec![Vec::new(); shards];
        let mut next = Self {
            rate: config.admit_per_minute,
            pass_secs: config.pass_secs,
            starts_ms: config.starts_ms,
            overbook: config.overbook,
            open: self.open
                || config
                    .starts_ms
                    .is_none_or(|s| now >= s.saturating_add(HORIZON_MS)),
            t_base: now,
            a_base: self.a_base,
            carry: 0,
            window: String::new(),
            ..self.clone()
        };
        if !self.open {
            return (next, admissions);
        }
        let n = self.elapsed_slots(now);
        let take = n.min(self.window_len());
        if n < self.window_len() {
            let ms = u64::try_from(now.saturating_sub(self.t_base)).unwrap_or(0);
            next.carry = (self.carry + u64::from(self.rate).saturating_mul(ms)) - n * MINUTE_MS;
        }
        for (j, &c) in self
            .window
            .as_bytes()
            .iter()
            .take(take as usize)
            .enumerate()
        {
            let Some(s) = shard_of_digit(c).filter(|&s| s < shards) else {
                continue;
            };
            let k = self.a_base + j as u64;
            admissions[s].push((next.shard_base[s], self.slot_ms(k)));
            next.shard_base[s] += 1;
        }
        next.a_base += take;
        (next, admissions)
    }

    /// How many heads to ask each shard for: enough slots for three ticks at the rate.
    pub fn window_target(&self) -> usize {
        let per_ticks = (u64::from(self.rate) * 3 * TICK_MS as u64).div_ceil(MINUTE_MS) + 1;
        usize::try_from(per_ticks).map_or(MAX_WINDOW, |n| n.min(MAX_WINDOW))
    }

    /// This state with the window filled from the shards' heads (pulled with the new bases),
    /// and the join counts.
    #[must_use]
    pub fn with_window(mut self, heads: &[Vec<Head>], joined: Vec<u64>, pre_joined: u64) -> Self {
        if self.open {
            self.window = merge(heads, self.window_target())
                .into_iter()
                .map(digit)
                .collect();
        }
        self.joined = joined.iter().sum();
        self.shard_joined = joined;
        self.pre_joined = pre_joined;
        self
    }

    /// This state with the stock read at the tick (`None`: the origin could not be read; the
    /// last reading stands) and the passes outstanding (the shards' count, the tick's admissions
    /// included): the window keeps only the slots the stock allows, so the room never has more
    /// than `remaining × overbook` passes outstanding, and none at 0 remaining. Called after
    /// [`RoomState::with_window`].
    #[must_use]
    pub fn with_stock(mut self, stock: Option<Stock>, outstanding: u64) -> Self {
        if let Some(stock) = stock {
            self.remaining = Some(stock.remaining);
            self.held = stock.held;
        }
        self.outstanding = outstanding;
        let allowance = usize::try_from(self.allowance()).unwrap_or(usize::MAX);
        // One ASCII digit per slot.
        self.window.truncate(allowance.min(self.window.len()));
        self
    }
}

/// Admissions per minute over `samples` (instant, admitted count) no older than a minute before
/// the last one, once they span at least 5 s.
pub fn measured_per_minute(samples: &[(i64, u64)]) -> u32 {
    let Some(&(last_ms, last_n)) = samples.last() else {
        return 0;
    };
    let Some(&(first_ms, first_n)) = samples
        .iter()
        .find(|(ms, _)| last_ms - ms <= MINUTE_MS as i64)
    else {
        return 0;
    };
    let span = last_ms - first_ms;
    if span < 5_000 {
        return 0;
    }
    let per_minute = (last_n.saturating_sub(first_n)) * MINUTE_MS / span.unsigned_abs();
    u32::try_from(per_minute).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
