//! The waiting room's Durable Objects (`crate::room` decides; this stores and moves bytes):
//!
//! - `RoomShard` (SQLite-backed, [`SHARD_BINDING`], one of `room::SHARDS` per SKU, named
//!   `{sku}#{i}`): a shard of the room's members. `join` stores a member once (join instant,
//!   sequence, lottery ticket), `member` looks one up, `pull` (the coordinator's, once per tick)
//!   records admissions and lists the next members. Ranks: at the start, the pre-queue members
//!   are ranked by ticket; later joiners get the next rank as they join.
//! - `RoomCoordinator` ([`COORDINATOR_BINDING`], one per SKU, named by the SKU): runs the room's
//!   tick from its alarm every `TICK_MS` while the room is in use, and answers `state` (the
//!   workers cache it for a second, so it is asked about once per second per data center).
//!
//! Each object counts the requests it serves per second and keeps the peak
//! (`GET /v1/queue/{sku}/stats`). The counters live in memory: an evicted object starts again.

use std::cell::{Cell, RefCell};

use futures_util::future::join_all;
use worker::wasm_bindgen::JsValue;
use worker::{
    DurableObject, Env, Error, Method, Request, RequestInit, Response, SqlStorage, SqlStorageValue,
    State, Stub, durable_object,
};

use crate::room::SHARDS;
use crate::room::admission::{self, HORIZON_MS, RoomConfig, RoomState, TICK_MS};
use crate::room::order::{Head, Key};
use crate::room::protocol::{
    JOIN_PATH, Joined, MEMBER_PATH, Member, MemberRequest, ObjectStats, PULL_PATH, PullReply,
    PullRequest, RequestMeter, RoomStats, STATE_PATH, STATS_PATH,
};

use super::http::now_ms;
use super::spent;
use super::sql::{int, raw_rows, text};

pub(crate) const SHARD_BINDING: &str = "ROOM_SHARD";
pub(crate) const COORDINATOR_BINDING: &str = "ROOM_COORDINATOR";
/// The coordinator stops ticking this long after the last state request and the last admission.
const IDLE_MS: i64 = 15_000;

fn shard_name(sku: &str, shard: u32) -> String {
    format!("{sku}#{shard}")
}

async fn call_text(stub: &Stub, path: &str, body: String) -> worker::Result<String> {
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_body(Some(JsValue::from_str(&body)));
    let request = Request::new_with_init(&format!("https://room.internal{path}"), &init)?;
    let mut response = stub.fetch_with_request(request).await?;
    if response.status_code() != 200 {
        return Err(Error::RustError(format!(
            "room object {path} answered {}",
            response.status_code()
        )));
    }
    response.text().await
}

fn member_reply(text: &str) -> worker::Result<Option<Member>> {
    Member::decode(text).ok_or_else(|| Error::RustError("a shard's member does not parse".into()))
}

/// A request's body, parsed by `decode` (every message between the room's objects is compact
/// text: `crate::room::protocol`).
async fn body<T>(req: &mut Request, decode: impl Fn(&str) -> Option<T>) -> Option<T> {
    decode(&req.text().await.ok()?)
}

/// The worker's (and the coordinator's) handle on a room's objects.
pub(crate) struct RoomClient<'a> {
    env: &'a Env,
    sku: &'a str,
}

impl<'a> RoomClient<'a> {
    pub(crate) fn new(env: &'a Env, sku: &'a str) -> Self {
        Self { env, sku }
    }

    fn shard(&self, shard: u32) -> worker::Result<Stub> {
        self.env
            .durable_object(SHARD_BINDING)?
            .get_by_name(&shard_name(self.sku, shard))
    }

    fn coordinator(&self) -> worker::Result<Stub> {
        self.env
            .durable_object(COORDINATOR_BINDING)?
            .get_by_name(self.sku)
    }

    pub(crate) async fn join(&self, input: &MemberRequest) -> worker::Result<Joined> {
        let text = call_text(&self.shard(input.shard)?, JOIN_PATH, input.encode()).await?;
        Joined::decode(&text)
            .ok_or_else(|| Error::RustError("a shard's join does not parse".into()))
    }

    pub(crate) async fn member(&self, input: &MemberRequest) -> worker::Result<Option<Member>> {
        let reply = member_reply(
            &call_text(&self.shard(input.shard)?, MEMBER_PATH, input.encode()).await?,
        )?;
        Ok(reply)
    }

    /// The room's state as [`RoomState::encode`] text.
    /// `input`: `sku\n` + [`RoomConfig::encode`].
    pub(crate) async fn state(&self, input: String) -> worker::Result<String> {
        call_text(&self.coordinator()?, STATE_PATH, input).await
    }

    /// The coordinator's stats, as JSON text (passed on as it is).
    pub(crate) async fn stats(&self) -> worker::Result<String> {
        call_text(&self.coordinator()?, STATS_PATH, "{}".into()).await
    }

    async fn pull(&self, input: &PullRequest) -> worker::Result<PullReply> {
        let text = call_text(&self.shard(input.shard)?, PULL_PATH, input.encode()).await?;
        PullReply::decode(&text)
            .ok_or_else(|| Error::RustError("a shard's pull does not parse".into()))
    }

    async fn shard_stats(&self, shard: u32) -> worker::Result<ObjectStats> {
        let text = call_text(&self.shard(shard)?, STATS_PATH, String::new()).await?;
        let (requests, peak) = text.split_once(';').unwrap_or(("0", "0"));
        Ok(ObjectStats {
            name: String::new(),
            requests: requests.parse().unwrap_or(0),
            peak_requests_per_sec: peak.parse().unwrap_or(0),
        })
    }
}

// ---- RoomShard ------------------------------------------------------------------------------

const SHARD_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS members (
    user TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    join_ms INTEGER NOT NULL,
    ticket TEXT NOT NULL,
    pre INTEGER NOT NULL,
    rank INTEGER,
    admitted_ms INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS members_by_rank ON members (rank);
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
}

const MEMBER_COLUMNS: &str = "seq, join_ms, ticket, pre, rank, admitted_ms, user";

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
            sql.exec(spent::SCHEMA, None)?;
            self.schema_ready.set(true);
        }
        Ok(sql)
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
        let mut heads = Vec::new();
        if finalized {
            let next = member_rows(
                &sql,
                &format!(
                    "SELECT {MEMBER_COLUMNS} FROM members WHERE rank >= ? ORDER BY rank LIMIT ?"
                ),
                vec![
                    i64::try_from(input.from_rank).unwrap_or(i64::MAX).into(),
                    i64::try_from(input.limit).unwrap_or(0).into(),
                ],
            )?;
            for r in next {
                let key = if r.pre == 1 {
                    Key::pre(
                        u64::from_str_radix(&r.ticket, 16).unwrap_or(u64::MAX),
                        &r.user,
                    )
                } else if r.join_ms < input.horizon_ms {
                    Key::post(r.join_ms, input.shard, u64::try_from(r.seq).unwrap_or(0))
                } else {
                    // Later ones joined later still: the next tick takes them.
                    break;
                };
                let Some(rank) = r.rank.and_then(|r| u64::try_from(r).ok()) else {
                    break;
                };
                heads.push(Head { rank, key }.encode());
            }
        }
        let ShardRow {
            joined, pre_joined, ..
        } = Self::counters(&sql)?;
        Ok(PullReply {
            heads,
            joined: u64::try_from(joined).unwrap_or(0),
            pre_joined: u64::try_from(pre_joined).unwrap_or(0),
        })
    }
}

// ---- RoomCoordinator ------------------------------------------------------------------------

#[durable_object(alarm)]
#[allow(unreachable_pub)] // exported to JavaScript by the macro; it must be `pub`
pub struct RoomCoordinator {
    state: State,
    env: Env,
    meter: RefCell<RequestMeter>,
}

impl std::fmt::Debug for RoomCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoomCoordinator").finish_non_exhaustive()
    }
}

/// What the coordinator keeps under `room`: written by its tick only (and once at creation).
/// Kept as text lines (`sku`, the state, `t:n,…`): no serde, a smaller Worker.
#[derive(Debug, Clone)]
struct Stored {
    sku: String,
    /// [`RoomState::encode`].
    state: String,
    /// (instant, admitted) at each tick while people waited, the last minute.
    samples: Vec<(i64, u64)>,
}

impl Stored {
    fn encode(&self) -> String {
        let samples: Vec<String> = self
            .samples
            .iter()
            .map(|(t, n)| format!("{t}:{n}"))
            .collect();
        format!("{}\n{}\n{}", self.sku, self.state, samples.join(","))
    }

    fn decode(text: &str) -> Option<Self> {
        let mut lines = text.split('\n');
        let (sku, state, samples) = (lines.next()?, lines.next()?, lines.next()?);
        let samples = samples
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| {
                let (t, n) = s.split_once(':')?;
                Some((t.parse().ok()?, n.parse().ok()?))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            sku: sku.to_owned(),
            state: state.to_owned(),
            samples,
        })
    }
}

/// What it keeps under `setting` (`config\nlast_request_ms`): written by state requests only.
#[derive(Debug, Clone)]
struct Setting {
    config: RoomConfig,
    last_request_ms: i64,
}

impl Setting {
    fn encode(&self) -> String {
        format!("{}\n{}", self.config.encode(), self.last_request_ms)
    }

    fn decode(text: &str) -> Option<Self> {
        let (config, last) = text.split_once('\n')?;
        Some(Self {
            config: RoomConfig::decode(config)?,
            last_request_ms: last.parse().ok()?,
        })
    }
}

async fn get_text(storage: &worker::Storage, key: &str) -> worker::Result<Option<String>> {
    storage.get::<String>(key).await
}

async fn get_stored(storage: &worker::Storage) -> worker::Result<Option<Stored>> {
    Ok(get_text(storage, "room")
        .await?
        .and_then(|t| Stored::decode(&t)))
}

async fn get_setting(storage: &worker::Storage) -> worker::Result<Option<Setting>> {
    Ok(get_text(storage, "setting")
        .await?
        .and_then(|t| Setting::decode(&t)))
}

impl DurableObject for RoomCoordinator {
    fn new(state: State, env: Env) -> Self {
        Self {
            state,
            env,
            meter: RefCell::new(RequestMeter::default()),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let now = now_ms();
        self.meter.borrow_mut().count(now);
        match req.path().as_str() {
            STATE_PATH => {
                let text = req.text().await.unwrap_or_default();
                let Some((sku, config)) = text
                    .split_once('\n')
                    .and_then(|(sku, c)| Some((sku.to_owned(), RoomConfig::decode(c)?)))
                else {
                    return Response::error("bad state", 400);
                };
                let storage = self.state.storage();
                let setting = Setting {
                    config,
                    last_request_ms: now,
                };
                storage.put("setting", setting.encode()).await?;
                let state = match get_stored(&storage).await? {
                    Some(stored) => stored.state,
                    None => {
                        let stored = Stored {
                            sku,
                            state: RoomState::new(config, SHARDS, now).encode(),
                            samples: Vec::new(),
                        };
                        storage.put("room", stored.encode()).await?;
                        stored.state
                    }
                };
                if storage.get_alarm().await?.is_none() {
                    storage.set_alarm(1).await?;
                }
                Response::ok(state)
            }
            STATS_PATH => Response::from_json(&self.stats().await?),
            _ => Response::error("not found", 404),
        }
    }

    async fn alarm(&self) -> worker::Result<Response> {
        let storage = self.state.storage();
        let (Some(mut stored), Some(setting)) =
            (get_stored(&storage).await?, get_setting(&storage).await?)
        else {
            return Response::ok("idle");
        };
        let now = now_ms();
        if let Err(e) = self.tick(&mut stored, setting.config, now).await {
            // Nothing published: the shards' records are idempotent, the next tick redoes it.
            worker::console_warn!("room tick failed: {e}");
        }
        storage.put("room", stored.encode()).await?;
        let state = RoomState::decode(&stored.state).unwrap_or_default();
        let waiting = state.joined > state.admitted(now);
        if waiting || now - setting.last_request_ms < IDLE_MS {
            storage.set_alarm(TICK_MS).await?;
        }
        Response::ok("ticked")
    }
}

impl RoomCoordinator {
    async fn tick(&self, stored: &mut Stored, config: RoomConfig, now: i64) -> worker::Result<()> {
        let client = &RoomClient::new(&self.env, &stored.sku);
        let current = RoomState::decode(&stored.state)
            .ok_or_else(|| Error::RustError("stored room state does not parse".into()))?;
        let drained = current.drained(now);
        let (next, admissions) = current.advance(config, now);
        let limit = next.window_target();
        let pulls = (0..SHARDS).map(|shard| {
            let input = PullRequest {
                shard,
                starts_ms: config.starts_ms,
                admissions: admissions.get(shard as usize).cloned().unwrap_or_default(),
                from_rank: next.shard_base.get(shard as usize).copied().unwrap_or(0),
                limit,
                horizon_ms: now - HORIZON_MS,
            };
            async move { client.pull(&input).await }
        });
        let mut heads = Vec::with_capacity(SHARDS as usize);
        let mut joined = Vec::with_capacity(SHARDS as usize);
        let mut pre_joined = 0;
        for reply in join_all(pulls).await {
            let reply = reply?;
            let shard = u32::try_from(heads.len()).unwrap_or(0);
            heads.push(
                reply
                    .heads
                    .iter()
                    .filter_map(|h| Head::decode(h, shard))
                    .collect::<Vec<_>>(),
            );
            joined.push(reply.joined);
            pre_joined += reply.pre_joined;
        }
        let mut next = next.with_window(&heads, joined, pre_joined);
        if drained || !next.open {
            stored.samples.clear();
        }
        if next.open {
            stored.samples.push((now, next.a_base));
            stored.samples.retain(|(t, _)| now - t <= 60_000);
        }
        next.measured_per_minute = admission::measured_per_minute(&stored.samples);
        stored.state = next.encode();
        Ok(())
    }

    async fn stats(&self) -> worker::Result<RoomStats> {
        let storage = self.state.storage();
        let Some(stored) = get_stored(&storage).await? else {
            return Ok(RoomStats::default());
        };
        let rate = get_setting(&storage)
            .await?
            .map_or(0, |s| s.config.admit_per_minute);
        let state = RoomState::decode(&stored.state).unwrap_or_default();
        let client = RoomClient::new(&self.env, &stored.sku);
        let shard_stats = join_all((0..SHARDS).map(|s| client.shard_stats(s))).await;
        let mut objects = vec![
            self.meter
                .borrow()
                .stats(&format!("coordinator {}", stored.sku)),
        ];
        for (shard, stats) in shard_stats.into_iter().enumerate() {
            let mut stats = stats?;
            stats.name = format!("shard {}", shard_name(&stored.sku, shard as u32));
            objects.push(stats);
        }
        let now = now_ms();
        Ok(RoomStats {
            joined: state.joined,
            admitted: state.admitted(now),
            admit_per_minute: rate,
            measured_per_minute: state.measured_per_minute,
            started: state.open,
            objects,
        })
    }
}
