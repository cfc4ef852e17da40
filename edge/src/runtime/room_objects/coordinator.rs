//! `RoomCoordinator`, one object per SKU (named by the SKU): runs the room's tick from its alarm
//! every `TICK_MS` while the room is in use — pulling every shard, reading the origin's SKU view
//! (the stock, the units held, the room's setting: one origin request per tick), advancing the
//! admissions within the stock, and publishing the state — and answers `state` (the workers cache
//! it for a second) and `stats`.

use std::cell::RefCell;

use futures_util::future::join_all;
use worker::{DurableObject, Env, Error, Request, Response, State, durable_object};

use crate::cache_policy::{self, OriginView};
use crate::room::SHARDS;
use crate::room::admission::{self, HORIZON_MS, RoomConfig, RoomState, Stock, TICK_MS};
use crate::room::order::{self, Head};
use crate::room::protocol::{PullRequest, RequestMeter, RoomStats, STATE_PATH, STATS_PATH};

use super::super::http::{self, now_ms};
use super::super::origin;
use super::{IDLE_MS, RoomClient, shard_name};

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
    /// The epoch the next tick settles (issue 36: the exact place), from 1.
    epoch: u64,
    /// Members numbered so far (the next place to give).
    placed: u64,
    /// Per shard: its members numbered so far (ranks `0..n`).
    settled: Vec<u64>,
}

impl Stored {
    fn encode(&self) -> String {
        let samples: Vec<String> = self
            .samples
            .iter()
            .map(|(t, n)| format!("{t}:{n}"))
            .collect();
        let settled: Vec<String> = self.settled.iter().map(u64::to_string).collect();
        format!(
            "{}\n{}\n{}\n{};{};{}",
            self.sku,
            self.state,
            samples.join(","),
            self.epoch,
            self.placed,
            settled.join(",")
        )
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
        // Absent in what was stored before issue 36: nobody numbered yet.
        let (epoch, placed, settled) = match lines.next() {
            Some(line) => {
                let f: Vec<&str> = line.split(';').collect();
                let settled = f
                    .get(2)?
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(|n| n.parse().ok())
                    .collect::<Option<Vec<u64>>>()?;
                (f.first()?.parse().ok()?, f.get(1)?.parse().ok()?, settled)
            }
            None => (1, 0, vec![0; SHARDS as usize]),
        };
        Some(Self {
            sku: sku.to_owned(),
            state: state.to_owned(),
            samples,
            epoch,
            placed,
            settled,
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
                            epoch: 1,
                            placed: 0,
                            settled: vec![0; SHARDS as usize],
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
        // A sold-out room keeps ticking (reading the stock, to resume) while shoppers poll it.
        let waiting = state.joined > state.admitted(now) && !state.sold_out();
        if waiting || now - setting.last_request_ms < IDLE_MS {
            storage.set_alarm(TICK_MS).await?;
        }
        Response::ok("ticked")
    }
}

impl RoomCoordinator {
    /// The sale's stock and room setting from the origin's SKU view (one request); `None` when
    /// the origin cannot say (the last reading stands).
    async fn read_view(&self, sku: &str) -> Option<shared::SkuView> {
        let settings = http::settings(&self.env).ok()?;
        let sku = shared::Sku::parse(sku).ok()?;
        let url = format!("{}/v1/skus/{sku}", settings.origin_url);
        match origin::send(
            worker::Method::Get,
            &url,
            &[],
            None,
            settings.origin_timeout_ms,
        )
        .await
        {
            Ok(r) => match cache_policy::classify_view(&sku, r.status, &r.body) {
                OriginView::Found(view) => Some(view),
                // No sale any more: nothing to admit to.
                OriginView::Missing => Some(shared::SkuView {
                    stock: 0,
                    held: 0,
                    waiting_room: None,
                    ..empty_view(&sku)
                }),
                OriginView::Unavailable => None,
            },
            Err(e) => {
                worker::console_warn!("room tick: the origin's view: {e}");
                None
            }
        }
    }

    async fn tick(&self, stored: &mut Stored, config: RoomConfig, now: i64) -> worker::Result<()> {
        let sku = stored.sku.clone();
        let client = &RoomClient::new(&self.env, &sku);
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
                pass_from_ms: now - i64::from(config.pass_secs) * 1_000,
                epoch: stored.epoch,
                settled_from: stored.settled.get(shard as usize).copied().unwrap_or(0),
            };
            async move { client.pull(&input).await }
        });
        let mut heads = Vec::with_capacity(SHARDS as usize);
        let mut joined = Vec::with_capacity(SHARDS as usize);
        let mut pre_joined = 0;
        let mut outstanding = 0;
        let mut newly_settled = Vec::with_capacity(SHARDS as usize);
        let mut settled = Vec::with_capacity(SHARDS as usize);
        for reply in join_all(pulls).await {
            let reply = reply?;
            let shard = u32::try_from(heads.len()).unwrap_or(0);
            let decode = |list: &[String]| {
                list.iter()
                    .filter_map(|h| Head::decode(h, shard))
                    .collect::<Vec<_>>()
            };
            heads.push(decode(&reply.heads));
            newly_settled.push(decode(&reply.newly_settled));
            joined.push(reply.joined);
            settled.push(reply.settled);
            pre_joined += reply.pre_joined;
            outstanding += reply.outstanding;
        }
        self.number(client, stored, &newly_settled, settled).await;
        // The stock is read after the shards counted the passes outstanding: a purchase between
        // the two is seen in the stock but not yet as a used pass (the worker tells the shard
        // after the origin's answer), so the allowance errs low, never high.
        let view = self.read_view(&stored.sku).await;
        let mut next = next;
        if let Some(room) = view.as_ref().and_then(|v| v.waiting_room) {
            // The setting as the origin shows it now (rate, pass, overbook): in force from here.
            let config = config.with_room(&room);
            next.rate = config.admit_per_minute;
            next.pass_secs = config.pass_secs;
            next.overbook = config.overbook;
        }
        let stock = view.map(|v| Stock {
            remaining: u64::try_from(v.stock).unwrap_or(0),
            held: u64::try_from(v.held).unwrap_or(0),
        });
        let mut next = next
            .with_window(&heads, joined, pre_joined)
            .with_stock(stock, outstanding);
        next.shard_settled.clone_from(&stored.settled);
        next.placed = stored.placed;
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

    /// Numbers the members the shards settled this tick, in the room's total order, from the
    /// next free place on, and tells each shard its members' places (issue 36: the exact
    /// position). A shard that cannot be told keeps those members unnumbered: their polls fall
    /// back to the estimate; the order of admission is unchanged.
    async fn number(
        &self,
        client: &RoomClient<'_>,
        stored: &mut Stored,
        newly_settled: &[Vec<Head>],
        settled: Vec<u64>,
    ) {
        let order = order::merge_ranked(newly_settled);
        let mut places = vec![Vec::new(); SHARDS as usize];
        for (i, (shard, rank)) in order.iter().enumerate() {
            if let Some(list) = places.get_mut(*shard as usize) {
                list.push((*rank, stored.placed + i as u64));
            }
        }
        let calls = places
            .iter()
            .enumerate()
            .filter(|(_, list)| !list.is_empty())
            .map(|(shard, list)| async move {
                let shard = u32::try_from(shard).unwrap_or(0);
                if let Err(e) = client.place(shard, list).await {
                    worker::console_warn!("room tick: numbering shard {shard} failed: {e}");
                }
            });
        join_all(calls).await;
        stored.placed += order.len() as u64;
        stored.settled = settled;
        stored.epoch += 1;
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

/// A view of no sale (the origin's 404): nothing remains.
fn empty_view(sku: &shared::Sku) -> shared::SkuView {
    shared::SkuView {
        sku: sku.to_string(),
        name: String::new(),
        price_cents: 0,
        stock: 0,
        held: 0,
        max_per_user: 0,
        starts_at: None,
        ends_at: None,
        paused: false,
        waiting_room: None,
        proof_of_work: None,
        network_limits: None,
    }
}
