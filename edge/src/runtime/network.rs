//! The bounds per network at run time (`crate::network` decides): this Worker instance's
//! knowledge ([`crate::network::Local`], in memory), the in-flight guard [`Flight`] that every
//! request let through holds until its answer is counted (a request that finds its network's
//! slot taken waits for it in the network's line, polling every [`POLL_MS`], one place per
//! account), and `NetworkLedger`, the small
//! SQLite-backed Durable Object per SKU and network (named `{sku}#{network}`) that counts what
//! happened: a new member of the room, units the origin sold. It is told of successes only, so it
//! is never hot: at most one call per admission or purchase of its network.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use worker::wasm_bindgen::JsValue;
use worker::{
    DurableObject, Env, Error, Method, Request, RequestInit, Response, SqlStorage, SqlStorageValue,
    State, durable_object,
};

use crate::network::{
    self, Admission, Bound, Count, Counted, Key, Kind, Local, Outcome, Place, Refusal, Ticket,
    Timing,
};

use super::http::now_ms;
use super::sql::{int, raw_rows};

/// The binding name of the namespace in `wrangler.toml`.
pub(crate) const BINDING: &str = "NETWORK_LEDGER";
const ADD_PATH: &str = "/add";
/// How often a request waiting in its network's line looks whether the slot is its own. Each
/// request polls on its own timer (nothing of one request wakes another's: workerd runs each in
/// its own context).
pub(crate) const POLL_MS: u64 = 20;

thread_local! {
    /// What this instance knows of the networks' counts.
    static LOCAL: RefCell<Local> = RefCell::new(Local::default());
}

/// A request let through by the bound of its network: it holds the network's one in-flight slot
/// of this instance until [`Flight::count`] or drop (which counts nothing), whatever path the
/// request takes.
#[derive(Debug)]
pub(crate) struct Flight {
    ticket: Option<Ticket>,
    window_ms: i64,
}

impl Flight {
    /// Lets a request of `n` by `account` of `key` through against `bound`, waiting in the
    /// network's line while another request holds its slot; or refuses it.
    pub(crate) async fn admit(
        key: Key,
        account: u64,
        n: u32,
        bound: Bound,
        timing: Timing,
    ) -> Result<Self, Refusal> {
        let window_ms = i64::from(bound.window_secs) * 1_000;
        let mut admission = LOCAL.with(|local| {
            local
                .borrow_mut()
                .admit(key, account, n, bound, now_ms(), timing)
        });
        // Leaves the line if this request goes away while it waits.
        let mut waiting: Option<Waiting> = None;
        loop {
            match admission {
                Admission::Go(ticket) => {
                    return Ok(Self {
                        ticket: Some(ticket),
                        window_ms,
                    });
                }
                Admission::Refused(refusal) => return Err(refusal),
                Admission::Wait(place) => {
                    // Made once: a second `Waiting` of the same place would leave the line when
                    // dropped.
                    let place = &waiting.get_or_insert_with(|| Waiting(place)).0;
                    worker::Delay::from(Duration::from_millis(POLL_MS)).await;
                    admission = LOCAL.with(|local| {
                        local
                            .borrow_mut()
                            .poll(place, account, n, bound, now_ms(), timing)
                    });
                }
            }
        }
    }

    fn settle(&mut self, outcome: Outcome) {
        if let Some(ticket) = self.ticket.take() {
            LOCAL.with(|local| local.borrow_mut().settle(&ticket, outcome));
        }
    }

    /// The request succeeded: count it in its network's ledger, then free the slot with what the
    /// ledger said (or, if the ledger cannot be had, with the success counted here only).
    pub(crate) async fn count(mut self, env: &Env) {
        let Some(ticket) = self.ticket.clone() else {
            return;
        };
        let outcome = match add(env, &ticket, self.window_ms).await {
            Ok(counted) => Outcome::Counted(counted),
            Err(e) => {
                worker::console_error!(
                    "network ledger {}: {e}; counted by this instance only",
                    network::ledger_name(&ticket.key.sku, &ticket.key.network)
                );
                Outcome::Uncounted
            }
        };
        self.settle(outcome);
    }
}

/// A place in a network's line, left when dropped (a no-op once it took the slot or was refused).
struct Waiting(Place);

impl Drop for Waiting {
    fn drop(&mut self) {
        LOCAL.with(|local| local.borrow_mut().leave(&self.0));
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.settle(Outcome::Nothing);
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct AddRequest {
    kind: Kind,
    n: u32,
    window_ms: i64,
}

async fn add(env: &Env, ticket: &Ticket, window_ms: i64) -> worker::Result<Counted> {
    let stub = env
        .durable_object(BINDING)?
        .get_by_name(&network::ledger_name(&ticket.key.sku, &ticket.key.network))?;
    let body = serde_json::to_string(&AddRequest {
        kind: ticket.key.kind,
        n: ticket.n,
        window_ms,
    })?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_body(Some(JsValue::from_str(&body)));
    let request = Request::new_with_init(&format!("https://network.internal{ADD_PATH}"), &init)?;
    let mut response = stub.fetch_with_request(request).await?;
    if response.status_code() != 200 {
        return Err(Error::RustError(format!(
            "network ledger answered {}",
            response.status_code()
        )));
    }
    response.json::<Counted>().await
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS counts (
    kind TEXT PRIMARY KEY,
    window_start_ms INTEGER NOT NULL,
    window_end_ms INTEGER NOT NULL,
    total INTEGER NOT NULL
);
";

#[durable_object(alarm)]
#[allow(unreachable_pub)] // exported to JavaScript by the macro; it must be `pub`
pub struct NetworkLedger {
    state: State,
    schema_ready: Cell<bool>,
}

impl std::fmt::Debug for NetworkLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkLedger").finish_non_exhaustive()
    }
}

impl DurableObject for NetworkLedger {
    fn new(state: State, _env: Env) -> Self {
        Self {
            state,
            schema_ready: Cell::new(false),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        if req.method() != Method::Post || req.path() != ADD_PATH {
            return Response::error("not found", 404);
        }
        let Ok(input) = req.json::<AddRequest>().await else {
            return Response::error("bad add", 400);
        };
        let counted = self.add(&input)?;
        // Forget the counts once their windows are over (one alarm at a time).
        let storage = self.state.storage();
        if storage.get_alarm().await?.is_none() {
            let at = counted.window_end_ms.saturating_add(60_000);
            storage
                .set_alarm(at.saturating_sub(now_ms()).max(1_000))
                .await?;
        }
        Response::from_json(&counted)
    }

    async fn alarm(&self) -> worker::Result<Response> {
        let rows = raw_rows(
            &self.sql()?,
            "SELECT MAX(window_end_ms) FROM counts",
            vec![],
        )?;
        let last_end_ms = int(rows.first().and_then(|r| r.first())).unwrap_or(0);
        let now = now_ms();
        if last_end_ms <= now {
            self.state.storage().delete_all().await?;
            self.schema_ready.set(false);
        } else {
            self.state
                .storage()
                .set_alarm(last_end_ms.saturating_add(60_000).saturating_sub(now))
                .await?;
        }
        Response::ok("checked")
    }
}

impl NetworkLedger {
    fn sql(&self) -> worker::Result<SqlStorage> {
        let sql = self.state.storage().sql();
        if !self.schema_ready.get() {
            sql.exec(SCHEMA, None)?;
            self.schema_ready.set(true);
        }
        Ok(sql)
    }

    /// Counts `input` (read, decide, write, no `.await`: atomic for this network).
    fn add(&self, input: &AddRequest) -> worker::Result<Counted> {
        let sql = self.sql()?;
        let kind = input.kind.as_str();
        let stored = raw_rows(
            &sql,
            "SELECT window_start_ms, total FROM counts WHERE kind = ?",
            vec![kind.into()],
        )?
        .first()
        .and_then(|r| {
            Some(Count {
                window_start_ms: int(r.first())?,
                total: u32::try_from(int(r.get(1))?).unwrap_or(u32::MAX),
            })
        });
        let now = now_ms();
        let count = Count::add(stored, input.n, input.window_ms, now);
        let window_end_ms = count.window_end_ms(input.window_ms);
        sql.exec(
            "INSERT INTO counts (kind, window_start_ms, window_end_ms, total) VALUES (?, ?, ?, ?) \
             ON CONFLICT (kind) DO UPDATE SET window_start_ms = excluded.window_start_ms, \
             window_end_ms = excluded.window_end_ms, total = excluded.total",
            vec![
                kind.into(),
                SqlStorageValue::try_from_i64(count.window_start_ms)?,
                SqlStorageValue::try_from_i64(window_end_ms)?,
                i64::from(count.total).into(),
            ],
        )?;
        Ok(Counted {
            total: count.total,
            window_end_ms,
        })
    }
}
