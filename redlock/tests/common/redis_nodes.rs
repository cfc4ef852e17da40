//! Real `redis-server` processes for tests and benches: started on free loopback ports with no
//! persistence (`--save "" --appendonly no`) in their own temporary directory, and killed
//! (SIGKILL), paused (SIGSTOP), resumed (SIGCONT) or restarted empty on the same port on demand.
//! Everything is killed when [`RedisNodes`] is dropped.
//!
//! Self-contained (std, tokio, tempfile): include it with
//! `#[path = "common/redis_nodes.rs"] mod redis_nodes;` (the origin's tests and this crate's
//! bench include this same file by its path). The server binary is `$REDIS_SERVER`,
//! else `/usr/bin/redis-server`, else `redis-server` on `PATH`.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer `PING` after being spawned (a loaded CI machine can be
/// slow to fork and exec).
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Port picks tried before giving up (a picked port can be taken between pick and bind).
const PORT_ATTEMPTS: usize = 10;

/// A set of independent `redis-server` processes.
#[derive(Debug)]
pub(crate) struct RedisNodes {
    nodes: Vec<Node>,
    /// Holds every node's working directory and log; removed on drop, after the processes.
    dir: tempfile::TempDir,
}

#[derive(Debug)]
struct Node {
    port: u16,
    dir: PathBuf,
    /// `None` while killed.
    child: Option<Child>,
}

impl RedisNodes {
    /// Starts `count` servers and waits until each answers `PING`. Panics (it is a test helper)
    /// if one cannot be started.
    pub(crate) async fn start(count: usize) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("redis-nodes-")
            .tempdir()
            .expect("create temp dir for redis nodes");
        let mut nodes = Vec::with_capacity(count);
        for index in 0..count {
            let node_dir = dir.path().join(format!("node-{index}"));
            std::fs::create_dir_all(&node_dir).expect("create node dir");
            nodes.push(Node::start_on_free_port(&node_dir).await);
        }
        Self { nodes, dir }
    }

    /// Number of nodes (running or not).
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// `redis://127.0.0.1:<port>/` of node `index`.
    pub(crate) fn url(&self, index: usize) -> String {
        format!("redis://127.0.0.1:{}/", self.nodes[index].port)
    }

    /// Every node's URL, in order.
    pub(crate) fn urls(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|index| self.url(index)).collect()
    }

    /// TCP port of node `index`.
    pub(crate) fn port(&self, index: usize) -> u16 {
        self.nodes[index].port
    }

    /// Process id of node `index`, if running.
    pub(crate) fn pid(&self, index: usize) -> Option<u32> {
        self.nodes[index].child.as_ref().map(Child::id)
    }

    /// Whether node `index` has a live process (paused counts as live).
    pub(crate) fn is_running(&self, index: usize) -> bool {
        self.nodes[index].child.is_some()
    }

    /// SIGKILLs node `index` and reaps it. Its data is gone (no persistence).
    pub(crate) fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }

    /// SIGSTOPs node `index`: connections stay open, nothing is answered.
    pub(crate) fn pause(&self, index: usize) {
        self.signal(index, "STOP");
    }

    /// SIGCONTs node `index`; it then answers everything queued meanwhile.
    pub(crate) fn resume(&self, index: usize) {
        self.signal(index, "CONT");
    }

    /// Kills node `index` if it runs, then starts it again, empty, on the same port, and waits
    /// until it answers `PING`.
    pub(crate) async fn restart(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        node.kill();
        let child = spawn(node.port, &node.dir);
        node.child = Some(child);
        if let Err(why) = node.wait_ready().await {
            panic!(
                "redis node {index} did not come back on port {}: {why}\n{}",
                node.port,
                node.log_tail()
            );
        }
    }

    /// Path of node `index`'s log file.
    pub(crate) fn log_path(&self, index: usize) -> PathBuf {
        self.nodes[index].dir.join("redis.log")
    }

    fn signal(&self, index: usize, signal: &str) {
        let pid = self
            .pid(index)
            .unwrap_or_else(|| panic!("redis node {index} is not running"));
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run the kill binary");
        assert!(status.success(), "kill -{signal} {pid} failed: {status}");
    }
}

impl Drop for RedisNodes {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }
}

impl Node {
    async fn start_on_free_port(dir: &Path) -> Self {
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let mut node = Self {
                port,
                dir: dir.to_path_buf(),
                child: Some(spawn(port, dir)),
            };
            match node.wait_ready().await {
                Ok(()) => return node,
                Err(why) => {
                    last_error = format!("port {port}: {why}\n{}", node.log_tail());
                    node.kill();
                }
            }
        }
        panic!("could not start redis-server after {PORT_ATTEMPTS} ports; last: {last_error}");
    }

    /// Polls `PING` until `+PONG`, failing early if the process exits (e.g. port taken).
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("redis-server exited: {status}"));
                }
            }
            let port = self.port;
            let pong = tokio::task::spawn_blocking(move || ping(port))
                .await
                .unwrap_or(false);
            if pong {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("no PONG within {READY_TIMEOUT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL also ends a SIGSTOPped process.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }
}

fn server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("REDIS_SERVER") {
        return PathBuf::from(path);
    }
    let default = PathBuf::from("/usr/bin/redis-server");
    if default.exists() {
        default
    } else {
        PathBuf::from("redis-server")
    }
}

fn spawn(port: u16, dir: &Path) -> Child {
    Command::new(server_binary())
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--daemonize", "no"])
        .args(["--protected-mode", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", server_binary().display()))
}

/// A port that was free a moment ago, chosen *below* the kernel's ephemeral range: outgoing
/// connections never take it while its node is down, and a reconnect to a dead node cannot
/// TCP-self-connect to it.
fn free_port() -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000_u16, ephemeral_low.max(10_001));
    for _ in 0..1000 {
        let port = low + u16::try_from(random_u64() % u64::from(high - low)).unwrap_or(0);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

/// A random number from std alone (each `RandomState` is seeded randomly).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0_u8; 7];
    stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}
