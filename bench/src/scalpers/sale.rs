//! One sale of `bench scalpers`: a fresh SKU put on sale on the origin with `starts_at` a few
//! seconds ahead (and, defended, `proof_of_work` and `network_limits`), the edge warmed, every
//! client made (and the farm's — and, warm, the honest shoppers' — connections opened) before the
//! start; then the honest shoppers click at the start plus their jitter and the farm fires at
//! the start, until every honest intent ended and the farm stopped; then the books are checked
//! against the database ([`crate::books`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::{Rng, SeedableRng};

use super::addresses;
use super::args::{Defence, FarmPlan, HonestSolver, ScalpersArgs};
use super::client::{self, SaleCtx, Tally};
use super::farm::{self, Farm, FarmAccount};
use super::honest::{self, Browser, Honest, HonestOutcome};
use super::report::SaleOutcome;
use super::solver::Solver;
use super::stack::{self, Stack};
use crate::books::{self, Generation, SkuBooks};
use crate::targets::Connections;
use crate::{cluster, sale::mint_token};

/// The honest shoppers' clicks, after the start: uniform in `0..=jitter`, the same for every sale
/// of a run (`seed`), so each sale meets the same crowd.
pub(super) fn clicks(n: usize, jitter: Duration, seed: u64) -> Vec<Duration> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let max = u64::try_from(jitter.as_micros()).unwrap_or(u64::MAX);
    (0..n)
        .map(|_| Duration::from_micros(rng.random_range(0..=max)))
        .collect()
}

/// When each of `n` stockpiling accounts asks for its challenge: evenly from `from` to `until`,
/// so the price the quiet sale asks stays low.
pub(super) fn stockpile_times(n: usize, from: Instant, until: Instant) -> Vec<Instant> {
    let span = until.saturating_duration_since(from);
    (0..n)
        .map(|i| from + span.mul_f64(i as f64 / n.max(1) as f64))
        .collect()
}

/// Runs the sale `name` (`off`, `on`, `stockpile`) with `defence`, `plan` and `connections`; see
/// the module docs.
pub(super) async fn run(
    stack: &Stack,
    args: &ScalpersArgs,
    name: &str,
    defence: Option<Defence>,
    plan: FarmPlan,
    connections: Connections,
) -> anyhow::Result<SaleOutcome> {
    let run_id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let sku = format!("SCALP-{}-{connections}-{run_id}", name.to_uppercase());
    let edge = stack.edge_url.clone();

    // Every client first: 2,000 of them take a moment.
    let clicks = clicks(
        args.honest,
        Duration::from_millis(args.honest_jitter_ms),
        args.seed,
    );
    let mut shoppers = Vec::with_capacity(args.honest);
    for (i, click) in clicks.into_iter().enumerate() {
        shoppers.push(Honest {
            client: client::bound_to(addresses::honest(i)?)?,
            token: mint_token(stack::SESSION_SECRET, &format!("honest-{run_id}-{i}")),
            click,
        });
    }
    let mut accounts = Vec::with_capacity(args.farm_accounts);
    for j in 0..args.farm_accounts {
        accounts.push(FarmAccount {
            client: client::bound_to(addresses::farm(j, args.farm_networks)?)?,
            token: mint_token(stack::SESSION_SECRET, &format!("farm-{run_id}-{j}")),
            network: addresses::farm_network(j, args.farm_networks),
        });
    }

    // The sale, starting `lead_secs` after the next whole second.
    let start_ms =
        (shared::Timestamp::now().unix_ms() / 1_000 + 1 + i64::try_from(args.lead_secs)?) * 1_000;
    let starts_at = shared::Timestamp::from_unix_ms(start_ms)
        .context("the start is not a valid time")?
        .to_rfc3339();
    let mut body = serde_json::json!({
        "name": "Limited sneaker",
        "price_cents": 19_900,
        "stock": args.stock,
        "max_per_user": args.max_per_user,
        "starts_at": starts_at,
    });
    if let Some(d) = defence {
        body["proof_of_work"] = serde_json::json!({"min_bits": d.min_bits, "max_bits": d.max_bits});
        body["network_limits"] =
            serde_json::json!({"units": d.units, "window_secs": d.window_secs});
    }
    let admin = reqwest::Client::new();
    let origin = &stack.cluster.origin_urls[0];
    let put = admin
        .put(format!("{origin}/v1/admin/skus/{sku}"))
        .bearer_auth(cluster::ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .context("putting the SKU on sale")?;
    let status = put.status();
    anyhow::ensure!(
        status.is_success(),
        "PUT {sku}: {status} {}",
        put.text().await.unwrap_or_default()
    );
    let warm = admin
        .get(format!("{edge}/warmup?{}", client::sku_query(&sku)))
        .bearer_auth(cluster::ADMIN_TOKEN)
        .send()
        .await
        .context("warming the edge")?;
    let status = warm.status();
    anyhow::ensure!(
        status.is_success(),
        "GET /warmup?sku={sku}: {status} {}",
        warm.text().await.unwrap_or_default()
    );
    let generation = books::current_generation(&stack.cluster.database_url, &sku).await?;

    // Connections opened before the start: the farm's always, the honest shoppers' when warm.
    let farm_open = futures::future::join_all(
        accounts
            .iter()
            .map(|a| client::preconnect(&a.client, &edge)),
    )
    .await;
    let honest_open = if connections == Connections::Warm {
        futures::future::join_all(
            shoppers
                .iter()
                .map(|s| client::preconnect(&s.client, &edge)),
        )
        .await
    } else {
        Vec::new()
    };
    let opened = |v: &[bool]| v.iter().filter(|ok| **ok).count();
    eprintln!(
        "   {sku}: starts at {starts_at}; connections opened before it: farm {}/{}, honest {}/{}",
        opened(&farm_open),
        accounts.len(),
        opened(&honest_open),
        if connections == Connections::Warm {
            shoppers.len()
        } else {
            0
        },
    );
    let until_start = Duration::from_millis(u64::try_from(
        (start_ms - shared::Timestamp::now().unix_ms()).max(0),
    )?);
    anyhow::ensure!(
        until_start > Duration::from_millis(200),
        "the clients took longer than --lead-secs to get ready: raise it"
    );
    let start = Instant::now() + until_start;
    let ctx = Arc::new(SaleCtx {
        edge: edge.clone(),
        sku: sku.clone(),
        body: serde_json::json!({"sku": sku, "qty": 1}).to_string(),
        start,
        deadline: start + Duration::from_secs(args.max_seconds),
        defended: defence.is_some(),
        honest: Tally::default(),
        farm: Tally::default(),
    });
    let browser = Arc::new(match args.honest_solver {
        HonestSolver::Native => Browser::Native {
            solver: Solver::spawn("honest-solver")?,
            hashes_per_sec: args.honest_hashes_per_sec,
        },
        HonestSolver::Minted => Browser::Minted {
            pow_secret: stack::POW_SECRET.as_bytes().to_vec(),
            hashes_per_sec: args.honest_hashes_per_sec,
        },
    });
    let the_farm = Arc::new(Farm {
        solver: Solver::spawn("farm-solver")?,
        given_up: (0..args.farm_networks)
            .map(|_| Arc::new(AtomicBool::new(false)))
            .collect(),
        sold_out: AtomicBool::new(false),
        units: AtomicU64::new(0),
        challenges: AtomicU64::new(0),
        stockpile_asked: AtomicU64::new(0),
        stockpiled: AtomicU64::new(0),
        stockpile_bits: std::sync::Mutex::new(Vec::new()),
        order_ids: std::sync::Mutex::new(Vec::new()),
        retry_share: args.farm_retry_share,
        max_per_user: u64::try_from(args.max_per_user)?,
    });

    let honest_tasks: Vec<_> = shoppers
        .into_iter()
        .map(|me| {
            let (ctx, browser) = (ctx.clone(), browser.clone());
            tokio::spawn(async move { honest::shop(&ctx, &browser, me).await })
        })
        .collect();
    // The stockpilers ask from now until a second before the start, round-robin over the
    // networks (account j is in network j mod n).
    let times = stockpile_times(
        plan.stockpile.min(accounts.len()),
        Instant::now(),
        start - Duration::from_secs(1),
    );
    let farm_tasks: Vec<_> = accounts
        .into_iter()
        .enumerate()
        .map(|(j, me)| {
            let (ctx, the_farm) = (ctx.clone(), the_farm.clone());
            let at = times.get(j).copied();
            tokio::spawn(async move {
                let proof = match at {
                    Some(at) => farm::stockpile(&ctx, &the_farm, &me, at).await,
                    None => None,
                };
                farm::account(&ctx, &the_farm, me, proof).await;
            })
        })
        .collect();
    let mut honest_outcomes: Vec<HonestOutcome> = Vec::with_capacity(honest_tasks.len());
    for task in futures::future::join_all(honest_tasks).await {
        honest_outcomes.push(task.context("an honest shopper panicked")?);
    }
    let honest_done = start.elapsed();
    for task in futures::future::join_all(farm_tasks).await {
        task.context("a farm account panicked")?;
    }
    let elapsed = start.elapsed();

    let the_farm = Arc::into_inner(the_farm).context("the farm is still shared")?;
    let farm_stats = the_farm.solver.finish()?;
    let honest_solver_cpu = match Arc::into_inner(browser).context("the browser is still shared")? {
        Browser::Native { solver, .. } => Some(solver.finish()?.cpu),
        Browser::Minted { .. } => None,
    };
    let farm_orders = the_farm.order_ids.into_inner().unwrap_or_default();
    let mut order_ids: Vec<String> = honest_outcomes
        .iter()
        .filter_map(|o| o.order_id.clone())
        .collect();
    order_ids.extend(farm_orders.iter().cloned());
    let books = SkuBooks {
        sku: sku.clone(),
        cap: args.max_per_user,
        generations: vec![Generation {
            number: generation,
            initial: args.stock,
            closed_with: None,
        }],
    };
    let mut invariants = books::check(&stack.cluster.database_url, &[books], &order_ids).await?;
    let honest_units = u64::try_from(honest_outcomes.iter().filter(|o| o.bought).count())?;
    let farm_units = the_farm.units.into_inner();
    if i64::try_from(honest_units + farm_units)? != invariants.units_in_orders {
        invariants.violations.push(format!(
            "{sku}: {honest_units} honest + {farm_units} farm 201s, {} units in the orders",
            invariants.units_in_orders
        ));
    }
    let ctx = Arc::into_inner(ctx).context("the sale is still shared")?;
    let mut stockpile_bits = the_farm.stockpile_bits.into_inner().unwrap_or_default();
    stockpile_bits.sort_unstable();
    Ok(SaleOutcome {
        connections,
        defence,
        plan,
        stockpile_asked: the_farm.stockpile_asked.into_inner(),
        stockpiled: the_farm.stockpiled.into_inner(),
        stockpile_bits,
        stock: args.stock,
        honest_units,
        farm_units,
        farm_solver: farm_stats,
        farm_challenges: the_farm.challenges.into_inner(),
        honest: honest_outcomes,
        honest_solver_cpu,
        honest_answers: ctx.honest.take(),
        farm_answers: ctx.farm.take(),
        honest_done,
        elapsed,
        invariants,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clicks_spread_over_the_jitter_and_are_the_same_for_every_sale_of_a_run() {
        let a = clicks(1000, Duration::from_secs(2), 28);
        assert_eq!(a, clicks(1000, Duration::from_secs(2), 28));
        assert_ne!(a, clicks(1000, Duration::from_secs(2), 29));
        assert!(a.iter().all(|c| *c <= Duration::from_secs(2)));
        let early = a.iter().filter(|c| **c < Duration::from_secs(1)).count();
        assert!((400..=600).contains(&early), "{early}");
        assert!(clicks(3, Duration::ZERO, 1).iter().all(|c| c.is_zero()));
    }

    #[test]
    fn the_stockpilers_ask_evenly_before_the_start() {
        let from = Instant::now();
        let t = stockpile_times(4, from, from + Duration::from_secs(8));
        assert_eq!(
            t.iter().map(|t| *t - from).collect::<Vec<_>>(),
            [0, 2, 4, 6].map(Duration::from_secs)
        );
        assert!(stockpile_times(0, from, from).is_empty());
    }
}
