//! Messages between the worker, the room's shard objects and its coordinator object (JSON over
//! the Durable Object `fetch`). Shards: [`JOIN_PATH`], [`MEMBER_PATH`], [`PULL_PATH`]; the
//! coordinator: [`STATE_PATH`]; both: [`STATS_PATH`].

use serde::Serialize;

pub const JOIN_PATH: &str = "/join";
pub const MEMBER_PATH: &str = "/member";
pub const PULL_PATH: &str = "/pull";
pub const STATE_PATH: &str = "/state";
pub const STATS_PATH: &str = "/stats";
/// Coordinator → shard, after a tick numbered its newly settled members: `rank:place,…`.
pub const PLACE_PATH: &str = "/place";

/// `rank:place,…` of [`PLACE_PATH`].
pub fn encode_places(places: &[(u64, u64)]) -> String {
    places
        .iter()
        .map(|(r, p)| format!("{r}:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

pub fn decode_places(text: &str) -> Option<Vec<(u64, u64)>> {
    text.split(',')
        .filter(|a| !a.is_empty())
        .map(|a| {
            let (r, p) = a.split_once(':')?;
            Some((r.parse().ok()?, p.parse().ok()?))
        })
        .collect()
}

/// Worker → shard, after a purchase with a pass bought: the member's pass is used, its slot in
/// the room's overbook is free (body: [`MemberRequest::encode`]).
pub const USED_PATH: &str = "/used";

/// Worker → shard: `user` joins with `ticket` (kept as it is if already there), spending `proof`
/// (a sale with a proof of work: the shard holds its members' spent proofs), or, without a
/// ticket, where is `user`? The answer is [`Joined::encode`] to a join, [`Member::encode`] to a
/// lookup. Every message between the room's
/// objects is compact text (`encode` / `decode`), not JSON: a smaller Worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRequest {
    pub shard: u32,
    pub user: String,
    pub ticket: Option<u64>,
    pub starts_ms: Option<i64>,
    /// The join's proof of work, verified by the worker, to spend once.
    pub proof: Option<crate::proof::Spend>,
}

fn parse_opt<T: std::str::FromStr>(s: &str) -> Option<Option<T>> {
    if s == "-" {
        Some(None)
    } else {
        s.parse().ok().map(Some)
    }
}

impl MemberRequest {
    /// `shard;user;ticket|-;starts_ms|-;proof id|-;proof expires_ms|-` (user ids and proof ids,
    /// hex, have no `;`).
    pub fn encode(&self) -> String {
        format!(
            "{};{};{};{};{};{}",
            self.shard,
            self.user,
            opt(self.ticket),
            opt(self.starts_ms),
            opt(self.proof.as_ref().map(|p| p.id.as_str())),
            opt(self.proof.as_ref().map(|p| p.expires_ms))
        )
    }

    pub fn decode(text: &str) -> Option<Self> {
        let f: Vec<&str> = text.split(';').collect();
        if f.len() != 6 {
            return None;
        }
        let proof = match (f[4], parse_opt::<i64>(f[5])?) {
            ("-", None) => None,
            (id, Some(expires_ms)) if id != "-" => Some(crate::proof::Spend {
                id: id.to_owned(),
                expires_ms,
            }),
            _ => return None,
        };
        Some(Self {
            shard: f[0].parse().ok()?,
            user: f[1].to_owned(),
            ticket: parse_opt(f[2])?,
            starts_ms: parse_opt(f[3])?,
            proof,
        })
    }
}

/// A shard's answer to a join: the member and whether this join made it one, or the join's proof
/// was spent before (nothing changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    Member { member: Member, created: bool },
    ProofSpent,
}

impl Joined {
    /// `spent`, or `new;<member>` / `old;<member>`.
    pub fn encode(&self) -> String {
        match self {
            Self::ProofSpent => "spent".to_owned(),
            Self::Member { member, created } => format!(
                "{};{}",
                if *created { "new" } else { "old" },
                Member::encode(Some(member))
            ),
        }
    }

    pub fn decode(text: &str) -> Option<Self> {
        if text == "spent" {
            return Some(Self::ProofSpent);
        }
        let (created, member) = text.split_once(';')?;
        let created = match created {
            "new" => true,
            "old" => false,
            _ => return None,
        };
        Some(Self::Member {
            member: Member::decode(member)??,
            created,
        })
    }
}

/// A member as its shard knows it; on the wire as [`Member::encode`] (`-`: never joined).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub shard: u32,
    pub rank: Option<u64>,
    pub join_ms: i64,
    pub pre: bool,
    pub admitted_ms: Option<i64>,
    /// The member's index in the room's total order (0 = first ever), once the coordinator
    /// numbered its epoch (issue 36): the exact place.
    pub place: Option<u64>,
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

impl Member {
    /// `shard;rank|-;join_ms;pre;admitted_ms|-;place|-`, or `-` for none.
    pub fn encode(member: Option<&Self>) -> String {
        member.map_or_else(
            || "-".to_owned(),
            |m| {
                format!(
                    "{};{};{};{};{};{}",
                    m.shard,
                    opt(m.rank),
                    m.join_ms,
                    u8::from(m.pre),
                    opt(m.admitted_ms),
                    opt(m.place)
                )
            },
        )
    }

    /// `None`: not a member's text; `Some(None)`: never joined.
    pub fn decode(text: &str) -> Option<Option<Self>> {
        if text == "-" {
            return Some(None);
        }
        let f: Vec<&str> = text.split(';').collect();
        if f.len() != 6 {
            return None;
        }
        let opt = |s: &str| -> Option<Option<i64>> {
            if s == "-" {
                Some(None)
            } else {
                s.parse().ok().map(Some)
            }
        };
        Some(Some(Self {
            shard: f[0].parse().ok()?,
            rank: opt(f[1])?.and_then(|r| u64::try_from(r).ok()),
            join_ms: f[2].parse().ok()?,
            pre: f[3] == "1",
            admitted_ms: opt(f[4])?,
            place: opt(f[5])?.and_then(|p| u64::try_from(p).ok()),
        }))
    }
}

/// Coordinator → shard, once per tick: record these admissions (rank, instant), then list the
/// next members from `from_rank` (at most `limit`; post-start ones only if they joined before
/// `horizon_ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    pub shard: u32,
    pub starts_ms: Option<i64>,
    pub admissions: Vec<(u64, i64)>,
    pub from_rank: u64,
    pub limit: usize,
    pub horizon_ms: i64,
    /// Passes given at or before this instant have expired: the shard counts the others
    /// (admitted, not used) as outstanding.
    pub pass_from_ms: i64,
    /// The epoch this tick settles: post-start members who joined before `horizon_ms` and have
    /// none get it (pre-queue members get 0 once ranked).
    pub epoch: u64,
    /// List the settled members from this rank on (those the coordinator has not numbered).
    pub settled_from: u64,
}

impl PullRequest {
    /// `shard;starts_ms|-;from_rank;limit;horizon_ms;rank:ms,…;pass_from_ms;epoch;settled_from`.
    pub fn encode(&self) -> String {
        let admissions: Vec<String> = self
            .admissions
            .iter()
            .map(|(r, ms)| format!("{r}:{ms}"))
            .collect();
        format!(
            "{};{};{};{};{};{};{};{};{}",
            self.shard,
            opt(self.starts_ms),
            self.from_rank,
            self.limit,
            self.horizon_ms,
            admissions.join(","),
            self.pass_from_ms,
            self.epoch,
            self.settled_from
        )
    }

    pub fn decode(text: &str) -> Option<Self> {
        let f: Vec<&str> = text.split(';').collect();
        if f.len() != 9 {
            return None;
        }
        let admissions = f[5]
            .split(',')
            .filter(|a| !a.is_empty())
            .map(|a| {
                let (r, ms) = a.split_once(':')?;
                Some((r.parse().ok()?, ms.parse().ok()?))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            shard: f[0].parse().ok()?,
            starts_ms: parse_opt(f[1])?,
            from_rank: f[2].parse().ok()?,
            limit: f[3].parse().ok()?,
            horizon_ms: f[4].parse().ok()?,
            admissions,
            pass_from_ms: f[6].parse().ok()?,
            epoch: f[7].parse().ok()?,
            settled_from: f[8].parse().ok()?,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullReply {
    /// `super::order::Head::encode` of each.
    pub heads: Vec<String>,
    pub joined: u64,
    pub pre_joined: u64,
    /// Its members' passes outstanding: admitted after `pass_from_ms`, not used for a purchase.
    pub outstanding: u64,
    /// How many of its members are settled (have an epoch): ranks `0..settled`.
    pub settled: u64,
    /// `super::order::Head::encode` of each settled member from `settled_from` on.
    pub newly_settled: Vec<String>,
}

impl PullReply {
    /// `joined;pre_joined;outstanding;settled;heads`, then one head per line, then the newly
    /// settled, one per line.
    pub fn encode(&self) -> String {
        let mut out = format!(
            "{};{};{};{};{}",
            self.joined,
            self.pre_joined,
            self.outstanding,
            self.settled,
            self.heads.len()
        );
        for h in self.heads.iter().chain(&self.newly_settled) {
            out.push('\n');
            out.push_str(h);
        }
        out
    }

    pub fn decode(text: &str) -> Option<Self> {
        let mut lines = text.split('\n');
        let counts: Vec<&str> = lines.next()?.split(';').collect();
        if counts.len() != 5 {
            return None;
        }
        let n_heads: usize = counts[4].parse().ok()?;
        let mut rest: Vec<String> = lines.map(str::to_owned).collect();
        if rest.len() < n_heads {
            return None;
        }
        let newly_settled = rest.split_off(n_heads);
        Some(Self {
            joined: counts[0].parse().ok()?,
            pre_joined: counts[1].parse().ok()?,
            outstanding: counts[2].parse().ok()?,
            settled: counts[3].parse().ok()?,
            heads: rest,
            newly_settled,
        })
    }
}

// Worker → coordinator (`STATE_PATH`): the room's state, with the room's setting (which the
// coordinator keeps) in the body as `sku\n` + `RoomConfig::encode`; the answer is
// `RoomState::encode` (compact text, no serde).

/// One object's request counters (between the objects as `requests;peak`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(utoipa::ToSchema))]
pub struct ObjectStats {
    pub name: String,
    pub requests: u64,
    pub peak_requests_per_sec: u64,
}

/// `GET /v1/queue/{sku}/stats` (built by the coordinator, passed on as text by the worker).
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(utoipa::ToSchema))]
pub struct RoomStats {
    pub joined: u64,
    pub admitted: u64,
    pub admit_per_minute: u32,
    pub measured_per_minute: u32,
    pub started: bool,
    pub objects: Vec<ObjectStats>,
}

/// Requests per second of one object: the current second's count and the peak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestMeter {
    pub requests: u64,
    pub second: i64,
    pub in_second: u64,
    pub peak: u64,
}

impl RequestMeter {
    /// Counts one request at `now_ms`.
    pub fn count(&mut self, now_ms: i64) {
        let second = now_ms.div_euclid(1_000);
        if second != self.second {
            self.second = second;
            self.in_second = 0;
        }
        self.requests += 1;
        self.in_second += 1;
        self.peak = self.peak.max(self.in_second);
    }

    pub fn stats(&self, name: &str) -> ObjectStats {
        ObjectStats {
            name: name.to_owned(),
            requests: self.requests,
            peak_requests_per_sec: self.peak,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_as_text() {
        let m = MemberRequest {
            shard: 31,
            user: "user:a@b.c-1".into(),
            ticket: Some(u64::MAX),
            starts_ms: None,
            proof: None,
        };
        assert_eq!(MemberRequest::decode(&m.encode()), Some(m.clone()));
        let m = MemberRequest {
            ticket: None,
            starts_ms: Some(5),
            proof: Some(crate::proof::Spend {
                id: "ab12".into(),
                expires_ms: 1_800_000_000_000,
            }),
            ..m
        };
        assert_eq!(MemberRequest::decode(&m.encode()), Some(m));
        for bad in ["1;u;-;-;ab12;-", "1;u;-;-;-;5", "1;u;-;-"] {
            assert_eq!(MemberRequest::decode(bad), None, "{bad}");
        }
        let member = Member {
            shard: 3,
            rank: Some(7),
            join_ms: 11,
            pre: false,
            admitted_ms: None,
            place: Some(40),
        };
        for joined in [
            Joined::ProofSpent,
            Joined::Member {
                member,
                created: true,
            },
            Joined::Member {
                member,
                created: false,
            },
        ] {
            assert_eq!(Joined::decode(&joined.encode()), Some(joined));
        }
        for bad in ["", "new;-", "maybe;3;7;11;0;-", "new"] {
            assert_eq!(Joined::decode(bad), None, "{bad}");
        }
        let p = PullRequest {
            shard: 2,
            starts_ms: Some(9),
            admissions: vec![(1, 10), (2, 20)],
            from_rank: 3,
            limit: 300,
            horizon_ms: 1_000,
            pass_from_ms: -5,
            epoch: 4,
            settled_from: 17,
        };
        assert_eq!(PullRequest::decode(&p.encode()), Some(p.clone()));
        let p = PullRequest {
            admissions: vec![],
            starts_ms: None,
            ..p
        };
        assert_eq!(PullRequest::decode(&p.encode()), Some(p));
        let r = PullReply {
            heads: vec!["1,0,5,0,0,0,u".into(), "2,1,0,7,3,1,".into()],
            joined: 9,
            pre_joined: 4,
            outstanding: 2,
            settled: 8,
            newly_settled: vec!["3,1,0,7,4,2,".into()],
        };
        assert_eq!(PullReply::decode(&r.encode()), Some(r.clone()));
        let r = PullReply { heads: vec![], ..r };
        assert_eq!(PullReply::decode(&r.encode()), Some(r));
        assert_eq!(PullReply::decode("x"), None);
        assert_eq!(MemberRequest::decode("1;u;-"), None);
    }

    #[test]
    fn members_round_trip_as_text() {
        let m = Member {
            shard: 3,
            rank: None,
            join_ms: 1_796_119_200_000,
            pre: true,
            admitted_ms: None,
            place: None,
        };
        assert_eq!(Member::decode(&Member::encode(Some(&m))), Some(Some(m)));
        let m = Member {
            rank: Some(7),
            admitted_ms: Some(5),
            pre: false,
            place: Some(123),
            ..m
        };
        assert_eq!(Member::decode(&Member::encode(Some(&m))), Some(Some(m)));
        assert_eq!(Member::decode(&Member::encode(None)), Some(None));
        assert_eq!(Member::decode("1;2"), None);
        assert_eq!(
            decode_places(&encode_places(&[(1, 9), (2, 11)])),
            Some(vec![(1, 9), (2, 11)])
        );
        assert_eq!(decode_places(""), Some(vec![]));
        assert_eq!(decode_places("1:x"), None);
    }

    #[test]
    fn the_meter_keeps_the_peak_second() {
        let mut m = RequestMeter::default();
        for ms in [0, 10, 999, 1_000, 2_500, 2_501, 2_502, 2_999] {
            m.count(ms);
        }
        assert_eq!((m.requests, m.peak), (8, 4));
        assert_eq!(m.stats("x").peak_requests_per_sec, 4);
    }
}
