//! Real processes for fault tests: the `origin` binary on a free port, and a private Postgres
//! server (initdb into a temp dir, run as the `postgres` user when the tests run as root) that a
//! test may stop and start without disturbing the machine's shared server.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const EDGE_SECRET: &str = "test-edge-secret-0123456789";
pub(crate) const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// The name and connection URL of the database behind a `#[sqlx::test]` pool (for processes
/// started by the test, which need a URL rather than a pool).
pub(crate) async fn database_of(pool: &sqlx::PgPool) -> (String, String) {
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(pool)
        .await
        .expect("current database");
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    // Keep the query (e.g. `sslmode`), replace the database.
    let (base, query) = base.split_once('?').unwrap_or((base.as_str(), ""));
    let (server, _) = base
        .rsplit_once('/')
        .expect("DATABASE_URL names a database");
    let url = if query.is_empty() {
        format!("{server}/{db}")
    } else {
        format!("{server}/{db}?{query}")
    };
    (db, url)
}

fn now_unix() -> i64 {
    shared::Timestamp::now().unix_secs()
}

/// A purchase of one unit of `sku`, signed with `secret` as the edge signs it (v2, key id
/// `default`), ready to send (add headers, a timeout, …).
pub(crate) fn signed_purchase(
    client: &reqwest::Client,
    base: &str,
    secret: &str,
    (user, key, sku): (&str, &str, &str),
) -> reqwest::RequestBuilder {
    let body = format!(r#"{{"sku":"{sku}","qty":1}}"#);
    let parts = shared::signing::SignedParts {
        method: "POST",
        path: "/v1/purchases",
        user,
        idempotency_key: key,
        body: body.as_bytes(),
    };
    let signature = shared::signing::sign(&shared::SecretRing::single(secret), now_unix(), &parts);
    client
        .post(format!("{base}/v1/purchases"))
        .header("flashgate-user", user)
        .header("idempotency-key", key)
        .header("flashgate-signature", signature)
        .body(body)
}

/// Creates (or replaces) `sku` through the admin API: `stock` units, at most `max_per_user` per
/// user. Panics unless the origin answers 200.
pub(crate) async fn put_sku(
    client: &reqwest::Client,
    base: &str,
    sku: &str,
    stock: i64,
    max_per_user: i64,
) {
    let res = client
        .put(format!("{base}/v1/admin/skus/{sku}"))
        .bearer_auth(ADMIN_TOKEN)
        .body(format!(
            r#"{{"name":"x","price_cents":1,"stock":{stock},"max_per_user":{max_per_user}}}"#
        ))
        .send()
        .await
        .expect("put sku");
    assert_eq!(res.status(), 200, "put {sku}");
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A client keeping up to `idle` connections per host alive, each request bounded by `timeout`.
pub(crate) fn http_client(idle: usize, timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(idle)
        .timeout(timeout)
        .build()
        .expect("client")
}

/// A running `origin` process.
#[derive(Debug)]
pub(crate) struct OriginProcess {
    pub(crate) child: Child,
    pub(crate) base: String,
}

impl OriginProcess {
    /// Starts the binary with the given database and Redis nodes, waiting for `/readyz` unless
    /// `wait` is false.
    pub(crate) async fn start(
        database_url: &str,
        redis_urls: &str,
        prefix: &str,
        extra: &[(&str, &str)],
        wait: bool,
    ) -> Self {
        Self::start_with_output(database_url, redis_urls, prefix, extra, wait, None).await
    }

    /// Starts the binary on the (migrated) database behind a `#[sqlx::test]` pool, with the
    /// Redis key prefix `test:<database>`, no migrations, no reconciliation and the `extra`
    /// settings after those; waits for `/readyz`.
    pub(crate) async fn start_on(
        pool: &sqlx::PgPool,
        redis_urls: &str,
        extra: &[(&str, &str)],
    ) -> Self {
        let (db, url) = database_of(pool).await;
        let mut env = vec![
            ("RUN_MIGRATIONS", "false"),
            ("RECONCILE_INTERVAL_SECS", "0"),
        ];
        env.extend_from_slice(extra);
        Self::start(&url, redis_urls, &format!("test:{db}"), &env, true).await
    }

    /// Like [`OriginProcess::start`], with the process's stdout and stderr (its logs) appended
    /// to `log`.
    #[allow(dead_code)]
    pub(crate) async fn start_logged(
        database_url: &str,
        redis_urls: &str,
        prefix: &str,
        extra: &[(&str, &str)],
        log: &std::path::Path,
    ) -> Self {
        Self::start_with_output(database_url, redis_urls, prefix, extra, true, Some(log)).await
    }

    async fn start_with_output(
        database_url: &str,
        redis_urls: &str,
        prefix: &str,
        extra: &[(&str, &str)],
        wait: bool,
        log: Option<&std::path::Path>,
    ) -> Self {
        let port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_origin"));
        cmd.env("DATABASE_URL", database_url)
            .env("REDIS_URLS", redis_urls)
            .env("REDIS_KEY_PREFIX", prefix)
            .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
            .env("EDGE_SHARED_SECRET", EDGE_SECRET)
            .env("ADMIN_TOKEN", ADMIN_TOKEN)
            // The list forms would conflict with the single ones if inherited from the shell.
            .env_remove("EDGE_SHARED_SECRETS")
            .env_remove("ADMIN_TOKENS")
            .env("RUST_LOG", "warn");
        match log {
            None => {
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
            }
            Some(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("open log");
                cmd.stdout(file.try_clone().expect("log")).stderr(file);
            }
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start origin");
        let me = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        if wait {
            me.wait_ready(Duration::from_secs(30)).await;
        }
        me
    }

    pub(crate) async fn wait_ready(&self, timeout: Duration) {
        let client = reqwest::Client::new();
        let start = Instant::now();
        while start.elapsed() < timeout {
            if client
                .get(format!("{}/readyz", self.base))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("origin {} not ready within {timeout:?}", self.base);
    }

    /// SIGTERM, then waits (up to 30 s, then SIGKILL) for the process to exit; its status.
    pub(crate) async fn terminate(&mut self) -> std::process::ExitStatus {
        self.signal("-TERM");
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if start.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                return self.child.wait().expect("wait origin");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(ok.success(), "kill {sig}");
    }
}

impl Drop for OriginProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private Postgres server.
#[derive(Debug)]
pub(crate) struct PrivatePostgres {
    pub(crate) port: u16,
    dir: PathBuf,
    bin: PathBuf,
    child: Option<Child>,
    /// Extra `-c name=value` server settings.
    settings: Vec<String>,
    _tmp: tempfile::TempDir,
}

fn pg_bin() -> PathBuf {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<PathBuf> = std::fs::read_dir(root)
        .expect("postgres installed")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    versions.sort();
    versions.pop().expect("a postgres version").join("bin")
}

fn as_postgres(bin: &Path, program: &str) -> Command {
    // Postgres refuses to run as root.
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    if is_root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(program));
        c
    } else {
        Command::new(bin.join(program))
    }
}

impl PrivatePostgres {
    pub(crate) async fn start() -> Self {
        Self::start_with(|_| Vec::new()).await
    }

    /// A server that accepts TCP connections only over TLS (`hostssl`; `hostnossl` is
    /// rejected), presenting `cert`/`key` (copied, owned by the server's user, mode 0600).
    pub(crate) async fn start_with_tls(cert: &Path, key: &Path) -> Self {
        let (cert, key) = (cert.to_owned(), key.to_owned());
        Self::start_with(move |root| {
            let tls = root.join("tls");
            std::fs::create_dir_all(&tls).expect("mkdir tls");
            std::fs::copy(&cert, tls.join("server.crt")).expect("copy cert");
            std::fs::copy(&key, tls.join("server.key")).expect("copy key");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                tls.join("server.key"),
                std::fs::Permissions::from_mode(0o600),
            )
            .expect("chmod key");
            std::fs::write(
                root.join("data").join("pg_hba.conf"),
                "local all all trust\n\
                 hostssl all all 127.0.0.1/32 trust\n\
                 hostnossl all all 127.0.0.1/32 reject\n",
            )
            .expect("write pg_hba.conf");
            vec![
                "ssl=on".to_owned(),
                format!("ssl_cert_file={}", tls.join("server.crt").display()),
                format!("ssl_key_file={}", tls.join("server.key").display()),
            ]
        })
        .await
    }

    /// Runs `prepare` on the temp root after `initdb` (its `data/` exists) and before the
    /// first start; it returns extra server settings.
    async fn start_with(prepare: impl FnOnce(&Path) -> Vec<String>) -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("flashgate-pg-")
            .tempdir()
            .expect("tempdir");
        let dir = tmp.path().join("data");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(tmp.path())
            .status();
        let bin = pg_bin();
        let out = as_postgres(&bin, "initdb")
            .args(["-D"])
            .arg(&dir)
            .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
            .output()
            .expect("initdb");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let settings = prepare(tmp.path());
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(tmp.path())
            .status();
        let mut me = Self {
            port: free_port(),
            dir,
            bin,
            child: None,
            settings,
            _tmp: tmp,
        };
        me.resume().await;
        me
    }

    pub(crate) fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Starts (again) on the same port and data directory, and waits until it accepts.
    pub(crate) async fn resume(&mut self) {
        let child = as_postgres(&self.bin, "postgres")
            .arg("-D")
            .arg(&self.dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
            ])
            .arg(format!("unix_socket_directories={}", self.dir.display()))
            .args(["-c", "fsync=off"])
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start postgres");
        self.child = Some(child);
        let start = Instant::now();
        loop {
            let ok = Command::new(self.bin.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "private postgres did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops it hard (SIGKILL of the postmaster's process group is what a crash looks like;
    /// here SIGQUIT: immediate shutdown without a checkpoint, children killed).
    pub(crate) fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Signal the postmaster itself (its pid heads postmaster.pid): SIGQUIT is an
            // immediate shutdown without a checkpoint, what a crash looks like to clients.
            let pid_file = self.dir.join("postmaster.pid");
            let pid = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|s| s.lines().next().map(str::to_owned));
            if let Some(pid) = pid {
                let _ = Command::new("kill").args(["-QUIT", &pid]).status();
            }
            let start = Instant::now();
            while pid_file.exists() && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        self.crash();
    }
}
