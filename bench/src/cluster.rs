//! A throwaway local cluster for `bench compare` and `bench soak`: `redis-server` nodes on free
//! ports, a fresh Postgres database, and M server processes — origins, or the bench's own
//! ceiling or redis-lua servers (`serve/`) — all stopped (killed) when the run ends. The
//! database is dropped when the run passed and kept (its name printed) for inspection when not.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::process::{Child, Command};

pub(crate) const EDGE_SECRET: &str = "bench-edge-secret-0123456789";
pub(crate) const ADMIN_TOKEN: &str = "bench-admin-token-0123456789";
/// The origins' `PAYMENT_WEBHOOK_SECRETS` (what `bench holds` signs its payments with).
pub(crate) const WEBHOOK_SECRET: &str = "whsec_bench_0123456789abcdef0123";

/// The server processes a cluster runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Server<'a> {
    /// `origin` (the binary at `bin`) over `redis_nodes` Redlock nodes.
    Origin {
        bin: &'a Path,
        /// The baseline: `BATCH_MAX=1`, `LOCK_MAX_HOLD_MS=0` — one lease and one transaction per
        /// purchase (else the origin's defaults).
        one_per_lease: bool,
        redis_nodes: usize,
    },
    /// `bench serve-ceiling`: no Redis.
    Ceiling,
    /// `bench serve-redis-lua` over one Redis node, `db_pool` Postgres connections per process.
    RedisLua { db_pool: u32 },
}

impl Server<'_> {
    fn redis_nodes(self) -> usize {
        match self {
            Self::Origin { redis_nodes, .. } => redis_nodes,
            Self::Ceiling => 0,
            Self::RedisLua { .. } => 1,
        }
    }
}

pub(crate) struct Cluster {
    /// The server processes' base URLs (origins, or the ceiling / redis-lua servers).
    pub(crate) origin_urls: Vec<String>,
    /// Process ids of the servers, in the order of `origin_urls` (for `/proc` sampling).
    pub(crate) origin_pids: Vec<u32>,
    /// Process ids of the `redis-server` nodes.
    pub(crate) redis_pids: Vec<u32>,
    /// `redis://` URLs of the nodes, in the order of `redis_pids`.
    pub(crate) redis_urls: Vec<String>,
    pub(crate) database_url: String,
    /// The server's URL (the `--postgres` argument) and the run's own database on it.
    postgres: String,
    db: String,
    children: Vec<Child>,
    _dir: tempdir::Dir,
}

mod tempdir {
    /// A temporary directory removed on drop.
    pub(crate) struct Dir(pub(crate) std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// `postgres` (a `postgres://` URL) naming database `db` instead of its own, with everything
/// else kept: user, password, host, port and the query (`?sslmode=disable`, …).
fn database_url(postgres: &str, db: &str) -> anyhow::Result<String> {
    let mut url = url::Url::parse(postgres).context("--postgres must be a postgres:// URL")?;
    if url.cannot_be_a_base() {
        anyhow::bail!("--postgres must be a postgres://host/<database> URL");
    }
    url.set_path(db);
    Ok(url.into())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn wait_until(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> bool,
) -> anyhow::Result<()> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if check().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("{what} did not become ready within {timeout:?}")
}

impl Cluster {
    /// Starts `processes` servers of kind `server` with what they need, on `postgres`.
    pub(crate) async fn start(
        server: Server<'_>,
        postgres: &str,
        processes: usize,
    ) -> anyhow::Result<Self> {
        if let Server::Origin { bin, .. } = server {
            anyhow::ensure!(
                bin.exists(),
                "{} not found: run `cargo build --release -p origin` first",
                bin.display()
            );
        }
        let redis_nodes = server.redis_nodes();
        let dir =
            std::env::temp_dir().join(format!("flashgate-bench-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        let dir = tempdir::Dir(dir);
        let mut children = Vec::new();
        let mut redis_urls = Vec::new();
        let mut redis_pids = Vec::new();
        for _ in 0..redis_nodes {
            let port = free_port()?;
            let child = Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .arg("--dir")
                .arg(&dir.0)
                .stdout(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context("starting redis-server")?;
            redis_pids.push(child.id().context("redis-server exited at once")?);
            children.push(child);
            redis_urls.push(format!("redis://127.0.0.1:{port}"));
        }
        for url in &redis_urls {
            let client = redis_ping_client(url);
            wait_until("redis-server", Duration::from_secs(10), async || {
                client.connect().await.is_ok()
            })
            .await?;
        }

        let db = format!("flashgate_bench_{}", uuid::Uuid::new_v4().simple());
        // Checked before the database exists: a bad --postgres leaves nothing behind.
        let database_url = database_url(postgres, &db)?;
        let admin = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(postgres)
            .await
            .context("connecting to Postgres")?;
        sqlx::query(&format!("CREATE DATABASE {db}"))
            .execute(&admin)
            .await?;

        let mut origin_urls = Vec::new();
        let mut origin_pids = Vec::new();
        let bench_bin = std::env::current_exe().context("locating the bench binary")?;
        for i in 0..processes {
            let port = free_port()?;
            let listen = format!("127.0.0.1:{port}");
            let log = std::fs::File::create(dir.0.join(format!("origin-{i}.log")))?;
            let mut command = match server {
                Server::Origin {
                    bin, one_per_lease, ..
                } => {
                    let mut c = Command::new(bin);
                    if one_per_lease {
                        c.env("BATCH_MAX", "1").env("LOCK_MAX_HOLD_MS", "0");
                    }
                    c.env("DATABASE_URL", &database_url)
                        .env("REDIS_URLS", redis_urls.join(","))
                        .env("LISTEN_ADDR", &listen)
                        .env_remove("EDGE_SHARED_SECRETS")
                        .env_remove("ADMIN_TOKENS")
                        .env("PAYMENT_WEBHOOK_SECRETS", WEBHOOK_SECRET)
                        // Half the pool (16) for payment deliveries: `bench holds` pays 70 % of
                        // a hot sale's holds by webhook.
                        .env("PAYMENT_WEBHOOK_MAX_CONCURRENCY", "8")
                        .env("RUST_LOG", "warn");
                    c
                }
                Server::Ceiling => {
                    let mut c = Command::new(&bench_bin);
                    c.args(["serve-ceiling", "--listen", &listen]);
                    c
                }
                Server::RedisLua { db_pool } => {
                    let mut c = Command::new(&bench_bin);
                    c.args(["serve-redis-lua", "--listen", &listen])
                        .args(["--database-url", &database_url])
                        .args(["--redis-url", redis_urls.first().map_or("", String::as_str)])
                        .args(["--db-pool", &db_pool.to_string()]);
                    c
                }
            };
            let child = command
                .env("EDGE_SHARED_SECRET", EDGE_SECRET)
                .env("ADMIN_TOKEN", ADMIN_TOKEN)
                .stdout(log.try_clone()?)
                .stderr(log)
                .kill_on_drop(true)
                .spawn()
                .context("starting a server")?;
            origin_pids.push(child.id().context("a server exited at once")?);
            children.push(child);
            let url = format!("http://127.0.0.1:{port}");
            let client = reqwest::Client::new();
            let ready = format!("{url}/readyz");
            wait_until("server", Duration::from_secs(30), async || {
                client
                    .get(&ready)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            })
            .await?;
            origin_urls.push(url);
        }
        Ok(Self {
            origin_urls,
            origin_pids,
            redis_pids,
            redis_urls,
            database_url,
            postgres: postgres.to_owned(),
            db,
            children,
            _dir: dir,
        })
    }

    /// The servers' log files (for origins JSON lines, `RUST_LOG=warn`), in the order of
    /// `origin_urls`.
    pub(crate) fn origin_logs(&self) -> Vec<std::path::PathBuf> {
        (0..self.origin_urls.len())
            .map(|i| self._dir.0.join(format!("origin-{i}.log")))
            .collect()
    }

    /// Kills every process; drops the run's database when `passed`, else keeps it and says so.
    pub(crate) async fn stop(mut self, passed: bool) {
        for child in &mut self.children {
            let _ = child.kill().await;
        }
        if !passed {
            eprintln!(
                "kept database {} for inspection: {}",
                self.db, self.database_url
            );
            return;
        }
        let dropped = async {
            let admin = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(&self.postgres)
                .await?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.db))
                .execute(&admin)
                .await?;
            admin.close().await;
            Ok::<_, sqlx::Error>(())
        };
        if let Err(e) = dropped.await {
            eprintln!("could not drop database {}: {e}", self.db);
        }
    }
}

/// A tiny RESP PING over TCP, to wait for a node without pulling in a Redis client.
fn redis_ping_client(url: &str) -> PingClient {
    PingClient(url.trim_start_matches("redis://").to_owned())
}

struct PingClient(String);

impl PingClient {
    async fn connect(&self) -> std::io::Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(&self.0).await?;
        s.write_all(b"PING\r\n").await?;
        let mut buf = [0u8; 7];
        s.read_exact(&mut buf).await?;
        if &buf == b"+PONG\r\n" {
            Ok(())
        } else {
            Err(std::io::Error::other("unexpected reply"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::database_url;

    #[test]
    fn the_run_database_replaces_the_named_one_and_the_rest_of_the_url_is_kept() {
        assert_eq!(
            database_url(
                "postgres://postgres:pw@127.0.0.1:5432/postgres?sslmode=disable",
                "flashgate_bench_1"
            )
            .ok()
            .as_deref(),
            Some("postgres://postgres:pw@127.0.0.1:5432/flashgate_bench_1?sslmode=disable")
        );
        assert_eq!(
            database_url("postgres://postgres@127.0.0.1:5432", "b")
                .ok()
                .as_deref(),
            Some("postgres://postgres@127.0.0.1:5432/b")
        );
        assert!(database_url("not a url", "b").is_err());
    }
}
