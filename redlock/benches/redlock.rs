//! Redlock acquire+release benchmark: latency (p50/p99, one caller) and throughput (many
//! callers) on distinct keys over 1, 3 and 5 loopback `redis-server` nodes, next to a plain
//! single-node `SET NX PX` + Lua compare-and-delete baseline measured in the same run.
//!
//! Run: `cargo bench -p redlock --bench redlock` (about 40 s). Prints a Markdown table for
//! `docs/benchmarks.md`. `REDLOCK_BENCH_QUICK=1` shortens every phase (smoke test).

#[path = "../tests/common/redis_nodes.rs"]
mod redis_nodes;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis_nodes::RedisNodes;
use redlock::{NodeState, Redlock, RedlockConfig, RedlockMetrics, RetryPolicy};

/// Lock TTL (and `max_ttl`, so fresh nodes' recovery window is about this long).
const TTL: Duration = Duration::from_secs(2);
/// Keys are distinct, so attempts are never contended; this only rides out a slow moment.
const RETRY: RetryPolicy =
    RetryPolicy::jittered(Duration::from_millis(5), Duration::from_millis(100));

/// Phase lengths.
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Sequential warm-up operations (connections, scripts, allocator).
    warmup: usize,
    /// Sequential operations timed one by one.
    latency_ops: usize,
    /// Concurrent callers in the throughput phase.
    callers: usize,
    /// Length of the throughput phase.
    throughput_for: Duration,
}

/// What one subject measured.
#[derive(Debug)]
struct Measured {
    name: String,
    p50: Duration,
    p99: Duration,
    ops_per_sec: f64,
}

/// Something that can lock and unlock a key.
trait Subject: Clone + Send + Sync + 'static {
    fn cycle(&self, key: String) -> impl Future<Output = ()> + Send;
}

#[derive(Clone)]
struct RedlockSubject(Redlock);

impl Subject for RedlockSubject {
    async fn cycle(&self, key: String) {
        let lease = self
            .0
            .acquire(&key, TTL, &RETRY, Instant::now() + Duration::from_secs(10))
            .await
            .expect("acquire (distinct key)");
        self.0.release(lease).await.expect("release");
    }
}

/// The baseline: one node, `SET key token NX PX ttl`, then a compare-and-delete script.
#[derive(Clone)]
struct SingleNodeSubject {
    connection: ConnectionManager,
    release: Arc<redis::Script>,
}

impl Subject for SingleNodeSubject {
    async fn cycle(&self, key: String) {
        let mut connection = self.connection.clone();
        let token = format!("{:032x}", rand::random::<u128>());
        let ttl_ms = u64::try_from(TTL.as_millis()).expect("ttl fits");
        let set: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut connection)
            .await
            .expect("SET NX PX");
        assert!(set.is_some(), "distinct key was already locked");
        let deleted: i64 = self
            .release
            .key(&key)
            .arg(&token)
            .invoke_async(&mut connection)
            .await
            .expect("compare-and-delete");
        assert_eq!(deleted, 1);
    }
}

async fn measure<S: Subject>(name: &str, subject: S, plan: Plan) -> Measured {
    let run = rand::random::<u32>();
    for i in 0..plan.warmup {
        subject.cycle(format!("warm:{run}:{i}")).await;
    }
    let mut samples = Vec::with_capacity(plan.latency_ops);
    for i in 0..plan.latency_ops {
        let started = Instant::now();
        subject.cycle(format!("lat:{run}:{i}")).await;
        samples.push(started.elapsed());
    }
    samples.sort_unstable();
    let at = |q: usize| samples[(samples.len() * q / 100).min(samples.len() - 1)];

    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let callers: Vec<_> = (0..plan.callers)
        .map(|caller| {
            let (subject, done, stop) = (subject.clone(), done.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0_u64;
                while !stop.load(Ordering::Relaxed) {
                    subject.cycle(format!("tp:{run}:{caller}:{i}")).await;
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    tokio::time::sleep(plan.throughput_for).await;
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.expect("caller panicked");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let measured = Measured {
        name: name.to_owned(),
        p50: at(50),
        p99: at(99),
        ops_per_sec: done.load(Ordering::Relaxed) as f64 / elapsed,
    };
    eprintln!("measured {measured:?}");
    measured
}

async fn redlock_over(nodes: &RedisNodes) -> Redlock {
    let config = RedlockConfig {
        max_ttl: TTL,
        ..RedlockConfig::default()
    };
    let lock = Redlock::connect(&nodes.urls(), config, RedlockMetrics::default())
        .await
        .expect("config");
    // Fresh nodes sit out one recovery window (~max_ttl) after first contact.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !lock
        .node_states()
        .await
        .iter()
        .all(|s| *s == NodeState::Ready)
    {
        assert!(Instant::now() < deadline, "nodes never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    lock
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split(':').nth(1))
        .map_or("unknown CPU", str::trim)
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let redis = std::process::Command::new("/usr/bin/redis-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    format!("{model}, {cores} cores; {redis}")
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let quick = std::env::var_os("REDLOCK_BENCH_QUICK").is_some();
    let plan = if quick {
        Plan {
            warmup: 20,
            latency_ops: 200,
            callers: 8,
            throughput_for: Duration::from_millis(500),
        }
    } else {
        Plan {
            warmup: 300,
            latency_ops: 3000,
            callers: 32,
            throughput_for: Duration::from_secs(4),
        }
    };
    eprintln!("plan: {plan:?}");
    let mut results = Vec::new();

    let baseline_node = RedisNodes::start(1).await;
    let client = redis::Client::open(baseline_node.url(0)).expect("url");
    let connection = ConnectionManager::new(client).await.expect("connect");
    let release = Arc::new(redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    ));
    let baseline = SingleNodeSubject {
        connection,
        release,
    };
    results.push(measure("baseline: 1 node, SET NX PX + Lua release", baseline, plan).await);
    drop(baseline_node);

    for count in [1, 3, 5] {
        let nodes = RedisNodes::start(count).await;
        let lock = redlock_over(&nodes).await;
        let name = format!("Redlock, {count} node{}", if count == 1 { "" } else { "s" });
        results.push(measure(&name, RedlockSubject(lock), plan).await);
    }

    println!("Machine: {}", machine());
    println!(
        "Plan: {} sequential acquire+release for latency (after {} warm-up); {} concurrent callers for {:?} for throughput; a new key per operation; TTL {:?}.",
        plan.latency_ops, plan.warmup, plan.callers, plan.throughput_for, TTL
    );
    println!();
    println!("| subject | p50 | p99 | throughput (acquire+release/s) |");
    println!("|---|---:|---:|---:|");
    for m in &results {
        println!(
            "| {} | {:.0} µs | {:.0} µs | {:.0} |",
            m.name,
            m.p50.as_secs_f64() * 1e6,
            m.p99.as_secs_f64() * 1e6,
            m.ops_per_sec
        );
    }
}
