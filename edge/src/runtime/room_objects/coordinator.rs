//! `RoomCoordinator`, one object per SKU (named by the SKU): runs the room's tick from its alarm
//! every `TICK_MS` while the room is in use — pulling every shard, advancing the admissions, and
//! publishing the state — and answers `state` (the workers cache it for a second) and `stats`.

use std::cell::RefCell;

use futures_util::future::join_all;
use worker::{DurableObject, Env, Error, Request, Response, State, durable_object};

use crate::room::SHARDS;
use crate::room::admission::{self, HORIZON_MS, RoomConfig, RoomState, TICK_MS};
use crate::room::order::Head;
use crate::room::protocol::{PullRequest, RequestMeter, RoomStats, STATE_PATH, STATS_PATH};

use super::super::http::now_ms;
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
