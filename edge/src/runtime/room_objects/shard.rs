//! `RoomShard`, one of `room::SHARDS` SQLite-backed objects per SKU (named `{sku}#{i}`): a shard
//! of the room's members. `join` spends the join's proof of work (`super::super::spent`) and
//! stores a member once (join instant, sequence, lottery ticket), `member` looks one up, `pull`
//! (the coordinator's, once per tick) records admissions, lists the next members and counts the
//! passes outstanding, `used` marks a member's pass used by a purchase (its overbook slot frees),
//! `place` stores the places the coordinator numbered (issue 36: the exact position).

use std::cell::{Cell, RefCell};

use worker::{
    DurableObject, Env, Error, Request, Response, SqlStorage, SqlStorageValue, State,
    durable_object,
};

use crate::room::admission;
use crate::room::order::{Head, Key};
use crate::room::protocol::{
    JOIN_PATH, Joined, MEMBER_PATH, Member, MemberRequest, PLACE_PATH, PULL_PATH, PullReply,
    PullRequest, RequestMeter, STATS_PATH, USED_PATH, decode_places,
};

use super::super::http::now_ms;
use super::super::spent;
use super::super::sql::{int, raw_rows, text};
use super::body;

const SHARD_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS members (
    user TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    join_ms INTEGER NOT NULL,
    ticket TEXT NOT NULL,
    pre INTEGER NOT NULL,
    rank INTEGER,
    admitted_ms INTEGER,
    used_ms INTEGER,
    epoch INTEGER,
    place INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS members_by_rank ON members (rank);
CREATE INDEX IF NOT EXISTS members_by_admission ON members (admitted_ms);
CREATE TABLE IF NOT EXISTS shard (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    next_rank INTEGER NOT NULL,
    last_join_ms INTEGER NOT NULL,
    finalized INTEGER NOT NULL,
    joined INTEGER NOT NULL,
    pre_joined INTEGER NOT NULL
);
INSERT OR IGNORE INTO shard VALUES (1, 0, 0, 0, 0, 0, 0);
";

#[durable_object]
#[allow(unreachable_pub)] // exported to JavaScript by the macro; it must be `pub`
pub struct RoomShard {
    state: State,
    schema_ready: Cell<bool>,
    meter: RefCell<RequestMeter>,
}

impl std::fmt::Debug for RoomShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoomShard").finish_non_exhaustive()
    }
}

/// A `members` row, in the column order of [`MEMBER_COLUMNS`].
struct MemberRow {
    seq: i64,
    join_ms: i64,
    ticket: String,
    pre: i64,
    rank: Option<i64>,
    admitted_ms: Option<i64>,
    user: String,
    epoch: Option<i64>,
    place: Option<i64>,
}

const MEMBER_COLUMNS: &str = "seq, join_ms, ticket, pre, rank, admitted_ms, user, epoch, place";

impl MemberRow {
    fn from_values(v: &[SqlStorageValue]) -> Self {
        Self {
            seq: int(v.first()).unwrap_or(0),
            join_ms: int(v.get(1)).unwrap_or(0),
            ticket: text(v.get(2)),
            pre: int(v.get(3)).unwrap_or(0),
            rank: int(v.get(4)),
            admitted_ms: int(v.get(5)),
            user: text(v.get(6)),
            epoch: int(v.get(7)),
            place: int(v.get(8)),
        }
    }
}

fn member_rows(
    sql: &SqlStorage,
    query: &str,
    bindings: Vec<SqlStorageValue>,
) -> worker::Result<Vec<MemberRow>> {
    Ok(raw_rows(sql, query, bindings)?
        .iter()
        .map(|v| MemberRow::from_values(v))
        .collect())
}

/// The shard's own row: its counters.
struct ShardRow {
    seq: i64,
    next_rank: i64,
    last_join_ms: i64,
    finalized: i64,
    joined: i64,
    pre_joined: i64,
}

impl DurableObject for RoomShard {
    fn new(state: State, _env: Env) -> Self {
        Self {
            state,
            schema_ready: Cell::new(false),
            meter: RefCell::new(RequestMeter::default()),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        self.meter.borrow_mut().count(now_ms());
        match req.path().as_str() {
            JOIN_PATH => {
                let Some(input) = body(&mut req, MemberRequest::decode).await else {
                    return Response::error("bad join", 400);
                };
                Response::ok(self.join(&input)?.encode())
            }
            MEMBER_PATH => {
                let Some(input) = body(&mut req, MemberRequest::decode).await else {
                    return Response::error("bad member", 400);
                };
                let sql = self.sql()?;
                Self::finalize(&sql, input.starts_ms, now_ms())?;
                Response::ok(Member::encode(
                    Self::find(&sql, input.shard, &input.user)?.as_ref(),
                ))
            }
            PULL_PATH => {
                let Some(input) = body(&mut req, PullRequest::decode).await else {
                    return Response::error("bad pull", 400);
                };
                Response::ok(self.pull(&input)?.encode())
            }
            PLACE_PATH => {
                let Some(places) = body(&mut req, decode_places).await else {
                    return Response::error("bad places", 400);
                };
                self.place(&places)?;
                Response::ok("placed")
            }
            USED_PATH => {
                let Some(input) = body(&mut req, MemberRequest::decode).await else {
                    return Response::error("bad used", 400);
                };
                // Whether or not the tick has recorded the admission yet (a pass buys as soon as
                // its slot opens; the shard learns the instant at the next tick): only a pass
                // buys, so the member was admitted.
                self.sql()?.exec(
                    "UPDATE members SET used_ms = ? WHERE user = ? AND used_ms IS NULL",
                    vec![now_ms().into(), input.user.as_str().into()],
                )?;
                Response::ok("used")
            }
            STATS_PATH => {
                let m = *self.meter.borrow();
                Response::ok(format!("{};{}", m.requests, m.peak))
            }
            _ => Response::error("not found", 404),
        }
    }
}

impl RoomShard {
    fn sql(&self) -> worker::Result<SqlStorage> {
        let sql = self.state.storage().sql();
        if !self.schema_ready.get() {
            sql.exec(SHARD_SCHEMA, None)?;
            // Shards made before issue 36 lack its columns: add them once.
            for column in ["used_ms", "epoch", "place"] {
                if !Self::has_column(&sql, column)? {
                    sql.exec(
                        &format!("ALTER TABLE members ADD COLUMN {column} INTEGER"),
                        None,
                    )?;
                }
            }
            sql.exec(spent::SCHEMA, None)?;
            self.schema_ready.set(true);
        }
        Ok(sql)
    }

    fn has_column(sql: &SqlStorage, column: &str) -> worker::Result<bool> {
        Ok(raw_rows(
            sql,
            "SELECT COUNT(*) FROM pragma_table_info('members') WHERE name = ?",
            vec![column.into()],
        )?
        .first()
        .and_then(|v| int(v.first()))
        .unwrap_or(0)
            > 0)
    }

    fn counters(sql: &SqlStorage) -> worker::Result<ShardRow> {
        let rows = raw_rows(
            sql,
            "SELECT seq, next_rank, last_join_ms, finalized, joined, pre_joined FROM shard",
            vec![],
        )?;
        let v = rows
            .first()
            .ok_or_else(|| Error::RustError("room shard without its row".into()))?;
        let n = |i: usize| int(v.get(i)).unwrap_or(0);
        Ok(ShardRow {
            seq: n(0),
            next_rank: n(1),
            last_join_ms: n(2),
            finalized: n(3),
            joined: n(4),
            pre_joined: n(5),
        })
    }

    /// Once the start has passed: ranks the pre-queue by ticket (then user), once.
    fn finalize(sql: &SqlStorage, starts_ms: Option<i64>, now: i64) -> worker::Result<bool> {
        if Self::counters(sql)?.finalized == 1 {
            return Ok(true);
        }
        if starts_ms.is_some_and(|s| now < s) {
            return Ok(false);
        }
        let pre = member_rows(
            sql,
            &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE pre = 1 ORDER BY ticket, user"),
            vec![],
        )?;
        for (rank, row) in pre.iter().enumerate() {
            sql.exec(
                "UPDATE members SET rank = ? WHERE user = ?",
                vec![
                    i64::try_from(rank).unwrap_or(i64::MAX).into(),
                    row.user.as_str().into(),
                ],
            )?;
        }
        sql.exec(
            "UPDATE shard SET next_rank = ?, finalized = 1",
            vec![i64::try_from(pre.len()).unwrap_or(i64::MAX).into()],
        )?;
        Ok(true)
    }

    fn member(shard: u32, r: &MemberRow) -> Member {
        Member {
            shard,
            rank: r.rank.and_then(|r| u64::try_from(r).ok()),
            join_ms: r.join_ms,
            pre: r.pre == 1,
            admitted_ms: r.admitted_ms,
            place: r.place.and_then(|p| u64::try_from(p).ok()),
        }
    }

    fn find(sql: &SqlStorage, shard: u32, user: &str) -> worker::Result<Option<Member>> {
        Ok(member_rows(
            sql,
            &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE user = ?"),
            vec![user.into()],
        )?
        .first()
        .map(|r| Self::member(shard, r)))
    }

    /// Spends the join's proof (a spent one changes nothing), then stores `user` once; a second
    /// join finds the first.
    fn join(&self, input: &MemberRequest) -> worker::Result<Joined> {
        let sql = self.sql()?;
        if let Some(proof) = &input.proof {
            if spent::is_spent(&sql, proof)? {
                return Ok(Joined::ProofSpent);
            }
            spent::record(&sql, proof, now_ms())?;
        }
        // The shard's join instants never go back: its order is its join order.
        let now = now_ms().max(Self::counters(&sql)?.last_join_ms);
        let finalized = Self::finalize(&sql, input.starts_ms, now)?;
        if let Some(member) = Self::find(&sql, input.shard, &input.user)? {
            return Ok(Joined::Member {
                member,
                created: false,
            });
        }
        let counters = Self::counters(&sql)?;
        let seq = counters.seq + 1;
        let pre = admission::is_pre(now, input.starts_ms) && !finalized;
        let rank = (!pre).then_some(counters.next_rank);
        sql.exec(
            "INSERT INTO members (user, seq, join_ms, ticket, pre, rank) VALUES (?, ?, ?, ?, ?, ?)",
            vec![
                input.user.as_str().into(),
                seq.into(),
                now.into(),
                format!("{:016x}", input.ticket.unwrap_or(0)).into(),
                i64::from(pre).into(),
                rank.into(),
            ],
        )?;
        sql.exec(
            "UPDATE shard SET seq = ?, last_join_ms = ?, next_rank = next_rank + ?, \
             joined = joined + 1, pre_joined = pre_joined + ?",
            vec![
                seq.into(),
                now.into(),
                i64::from(!pre).into(),
                i64::from(pre).into(),
            ],
        )?;
        Ok(Joined::Member {
            member: Member {
                shard: input.shard,
                rank: rank.and_then(|r| u64::try_from(r).ok()),
                join_ms: now,
                pre,
                admitted_ms: None,
                place: None,
            },
            created: true,
        })
    }

    /// Records the admissions, lists the next members.
    fn pull(&self, input: &PullRequest) -> worker::Result<PullReply> {
        let sql = self.sql()?;
        let finalized = Self::finalize(&sql, input.starts_ms, now_ms())?;
        for &(rank, at) in &input.admissions {
            sql.exec(
                "UPDATE members SET admitted_ms = ? WHERE rank = ? AND admitted_ms IS NULL",
                vec![at.into(), i64::try_from(rank).unwrap_or(i64::MAX).into()],
            )?;
        }
        if finalized {
            // Settle: pre-queue members (ranked at the start) in epoch 0, post-start members
            // who joined before the horizon in this tick's epoch. Ranks follow join instants,
            // so the settled members are always ranks `0..settled`.
            sql.exec(
                "UPDATE members SET epoch = 0 \
                 WHERE epoch IS NULL AND rank IS NOT NULL AND pre = 1",
                None,
            )?;
            sql.exec(
                "UPDATE members SET epoch = ? \
                 WHERE epoch IS NULL AND rank IS NOT NULL AND pre = 0 AND join_ms < ?",
                vec![
                    i64::try_from(input.epoch).unwrap_or(i64::MAX).into(),
                    input.horizon_ms.into(),
                ],
            )?;
        }
        let heads = Self::settled_heads(&sql, input.shard, input.from_rank, Some(input.limit))?;
        let newly_settled = Self::settled_heads(&sql, input.shard, input.settled_from, None)?;
        let settled = raw_rows(
            &sql,
            "SELECT COUNT(*) FROM members WHERE epoch IS NOT NULL",
            vec![],
        )?
        .first()
        .and_then(|v| int(v.first()))
        .unwrap_or(0);
        let ShardRow {
            joined, pre_joined, ..
        } = Self::counters(&sql)?;
        // Passes outstanding: admitted since `pass_from_ms` (not expired), not used.
        let outstanding = raw_rows(
            &sql,
            "SELECT COUNT(*) FROM members WHERE admitted_ms > ? AND used_ms IS NULL",
            vec![input.pass_from_ms.into()],
        )?
        .first()
        .and_then(|v| int(v.first()))
        .unwrap_or(0);
        Ok(PullReply {
            heads,
            joined: u64::try_from(joined).unwrap_or(0),
            pre_joined: u64::try_from(pre_joined).unwrap_or(0),
            outstanding: u64::try_from(outstanding).unwrap_or(0),
            settled: u64::try_from(settled).unwrap_or(0),
            newly_settled,
        })
    }

    /// The settled members from `from_rank` on (at most `limit`), as [`Head::encode`] text.
    fn settled_heads(
        sql: &SqlStorage,
        shard: u32,
        from_rank: u64,
        limit: Option<usize>,
    ) -> worker::Result<Vec<String>> {
        // Bound as a JavaScript number: keep it an exact integer (not i64::MAX, which is not).
        let limit = limit.map_or(i64::from(u32::MAX), |l| {
            i64::try_from(l).unwrap_or(i64::from(u32::MAX))
        });
        let rows = member_rows(
            sql,
            &format!(
                "SELECT {MEMBER_COLUMNS} FROM members \
                 WHERE rank >= ? AND epoch IS NOT NULL ORDER BY rank LIMIT ?"
            ),
            vec![
                i64::try_from(from_rank).unwrap_or(i64::MAX).into(),
                limit.into(),
            ],
        )?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let rank = r.rank.and_then(|r| u64::try_from(r).ok())?;
                let key = if r.pre == 1 {
                    Key::pre(
                        u64::from_str_radix(&r.ticket, 16).unwrap_or(u64::MAX),
                        &r.user,
                    )
                } else {
                    Key::post(
                        r.epoch.and_then(|e| u64::try_from(e).ok()).unwrap_or(0),
                        r.join_ms,
                        shard,
                        u64::try_from(r.seq).unwrap_or(0),
                    )
                };
                Some(Head { rank, key }.encode())
            })
            .collect())
    }

    /// Stores the places the coordinator numbered (`rank:place,…`).
    fn place(&self, places: &[(u64, u64)]) -> worker::Result<()> {
        let sql = self.sql()?;
        for &(rank, place) in places {
            sql.exec(
                "UPDATE members SET place = ? WHERE rank = ?",
                vec![
                    i64::try_from(place).unwrap_or(i64::MAX).into(),
                    i64::try_from(rank).unwrap_or(i64::MAX).into(),
                ],
            )?;
        }
        Ok(())
    }
}
