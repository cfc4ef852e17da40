//! The run's own stack: a fresh Postgres database, Redis nodes and one origin
//! ([`crate::cluster`]), and the BUILT worker in workerd through `wrangler dev --config
//! edge/build/wrangler.toml` on a free port with fresh `--persist-to` state, started with the
//! same flags and secrets as the e2e harness (edge/e2e/harness.mjs) and in a process group of its
//! own (wrangler's node, esbuild and the workerd processes), which is stopped as a whole —
//! `SIGTERM`, then `SIGKILL` after 5 s — at the end of the run, on error too (and on drop).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::process::{Child, Command};

use crate::cluster::{self, Cluster, Server};

/// The session (JWT) secret of the run's edge, key id `s1`.
pub(super) const SESSION_SECRET: &str = "bench-session-secret-0123456789";
/// The proof-of-work secret of the run's edge, key id `p1`.
pub(super) const POW_SECRET: &str = "bench-pow-secret-0123456789";
const ROOM_SECRET: &str = "bench-room-secret-0123456789";

/// What the edge is started with besides its secrets.
#[derive(Debug, Clone)]
pub(super) struct EdgeSettings {
    pub(super) build_dir: PathBuf,
    pub(super) wrangler: PathBuf,
    pub(super) runtime: EdgeRuntime,
    pub(super) rate_quota: u32,
    pub(super) rate_window_secs: u32,
    pub(super) pow_peak: u32,
}

/// How the built worker is run in workerd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum EdgeRuntime {
    /// Miniflare alone (`edge/e2e/miniflare.mjs`): the same workerd, wasm, Durable Objects and
    /// Cache API, without wrangler's dev proxy in front (which, under this load, answers a raw
    /// `503 Your worker restarted mid-request` for any request whose forward to the worker fails)
    /// and without the DevTools inspector; a deployed worker has neither.
    Miniflare,
    /// `wrangler dev`, as the e2e suite runs it.
    Wrangler,
}

/// The running stack.
pub(super) struct Stack {
    pub(super) cluster: Cluster,
    pub(super) edge_url: String,
    edge: EdgeProcess,
    dir: PathBuf,
}

/// `wrangler dev` in its own process group.
#[derive(Debug)]
struct EdgeProcess {
    child: Option<Child>,
    pgid: Option<u32>,
}

impl EdgeProcess {
    fn signal(&self, signal: &str) {
        if let Some(pgid) = self.pgid {
            let _ = std::process::Command::new("kill")
                .args([signal, "--", &format!("-{pgid}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        self.signal("-TERM");
        if tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .is_err()
        {
            self.signal("-KILL");
            let _ = child.wait().await;
        }
        // workerd may outlive wrangler's node by a moment: the whole group goes.
        self.signal("-KILL");
        self.pgid = None;
    }
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.signal("-KILL");
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Stack {
    /// Starts the database, Redis, the origin `origin_bin` and the edge.
    pub(super) async fn start(
        origin_bin: &Path,
        postgres: &str,
        redis_nodes: usize,
        edge: &EdgeSettings,
    ) -> anyhow::Result<Self> {
        for built in [
            edge.build_dir.join("wrangler.toml"),
            edge.build_dir.join("index_bg.wasm"),
            edge.wrangler.clone(),
        ] {
            anyhow::ensure!(
                built.exists(),
                "{} not found: run `bash scripts/edge-build.sh --wasm-only` (and `npm ci`) first",
                built.display()
            );
        }
        let server = Server::Origin {
            bin: origin_bin,
            one_per_lease: false,
            redis_nodes,
        };
        let cluster = Cluster::start(server, postgres, 1).await?;
        let dir = std::env::temp_dir().join(format!(
            "flashgate-scalpers-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir)?;
        match start_edge(&cluster.origin_urls[0], edge, &dir).await {
            Ok((edge, edge_url)) => Ok(Self {
                cluster,
                edge_url,
                edge,
                dir,
            }),
            Err(e) => {
                cluster.stop(true).await;
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// Stops the edge's process group and the cluster (the database is kept unless `passed`).
    pub(super) async fn stop(mut self, passed: bool) {
        self.edge.stop().await;
        self.cluster.stop(passed).await;
        if passed {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("kept the edge's log and state in {}", self.dir.display());
        }
    }
}

async fn start_edge(
    origin_url: &str,
    edge: &EdgeSettings,
    dir: &Path,
) -> anyhow::Result<(EdgeProcess, String)> {
    let port = free_port()?;
    let inspector = free_port()?;
    let vars = [
        ("ORIGIN_URL", origin_url.to_owned()),
        ("SESSION_SECRETS", format!("s1:{SESSION_SECRET}")),
        (
            "EDGE_SHARED_SECRETS",
            format!("default:{}", cluster::EDGE_SECRET),
        ),
        ("ADMIN_TOKENS", cluster::ADMIN_TOKEN.to_owned()),
        ("ROOM_SECRETS", format!("r1:{ROOM_SECRET}")),
        ("POW_SECRETS", format!("p1:{POW_SECRET}")),
        // The single forms, passed empty (= unset), as the harness and scripts/edge-dev.sh do.
        ("SESSION_SECRET", String::new()),
        ("EDGE_SHARED_SECRET", String::new()),
        ("ADMIN_TOKEN", String::new()),
        ("ROOM_SECRET", String::new()),
        ("POW_SECRET", String::new()),
        ("RATE_LIMIT_QUOTA", edge.rate_quota.to_string()),
        ("RATE_LIMIT_WINDOW_SECS", edge.rate_window_secs.to_string()),
        ("POW_PEAK_ARRIVALS_PER_SEC", edge.pow_peak.to_string()),
    ];
    let log = std::fs::File::create(dir.join("wrangler.log"))?;
    let mut command = match edge.runtime {
        EdgeRuntime::Wrangler => {
            let mut command = Command::new(&edge.wrangler);
            command
                .arg("dev")
                .arg("--config")
                .arg(edge.build_dir.join("wrangler.toml"))
                .args(["--ip", "127.0.0.1", "--port", &port.to_string()])
                .args(["--inspector-port", &inspector.to_string()])
                .arg("--persist-to")
                .arg(dir.join("edge-state"))
                .args([
                    "--show-interactive-dev-session=false",
                    "--log-level",
                    "warn",
                ]);
            for (name, value) in &vars {
                command.args(["--var", &format!("{name}:{value}")]);
            }
            command
        }
        EdgeRuntime::Miniflare => {
            let vars: serde_json::Map<String, serde_json::Value> = vars
                .iter()
                .map(|(name, value)| ((*name).to_owned(), value.clone().into()))
                .collect();
            let mut command = Command::new("node");
            command
                .arg("edge/e2e/miniflare.mjs")
                .arg("--build")
                .arg(&edge.build_dir)
                .args(["--port", &port.to_string()])
                .arg("--persist")
                .arg(dir.join("edge-state"))
                .args(["--vars", &serde_json::Value::Object(vars).to_string()]);
            command
        }
    };
    let child = command
        .env("WRANGLER_SEND_METRICS", "false")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", edge.wrangler.display()))?;
    let pgid = child.id();
    let mut process = EdgeProcess {
        child: Some(child),
        pgid,
    };
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if let Some(child) = process.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            process.stop().await;
            anyhow::bail!(
                "the edge ({:?}) exited with {status}; see {}",
                edge.runtime,
                dir.join("wrangler.log").display()
            );
        }
        let ready = client
            .get(format!("{url}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            return Ok((process, url));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    process.stop().await;
    anyhow::bail!(
        "the edge ({:?}) not ready after 60 s; see {}",
        edge.runtime,
        dir.join("wrangler.log").display()
    )
}
