//! The origin's own HTTPS listener (`TLS_LISTEN_ADDR`), over real TLS with certificates made by
//! rcgen: mutual TLS refuses a client without a certificate of the configured CA; a rotated
//! certificate is served to new connections after a reload (on change, and on SIGHUP to the real
//! binary) while a connection opened before keeps working; a half-written rotation keeps the
//! previous certificate; and the server's bounds (the header deadline, the connection cap that
//! evicts silent sockets) hold on the HTTPS listener too. The client is tokio-rustls speaking
//! HTTP/1.1 by hand, so each test sees exactly which certificate a connection got.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use origin::Application;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::helpers;
use crate::processes::{OriginProcess, free_port};
use crate::tls::Pki;

/// The files the origin is pointed at; a rotation copies another [`Pki`]'s server pair over them.
struct ServedFiles {
    dir: tempfile::TempDir,
}

impl ServedFiles {
    fn of(pki: &Pki) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = Self { dir };
        files.serve(pki);
        std::fs::copy(pki.ca(), files.client_ca()).expect("copy CA");
        files
    }

    fn cert(&self) -> PathBuf {
        self.dir.path().join("tls.crt")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("tls.key")
    }

    fn client_ca(&self) -> PathBuf {
        self.dir.path().join("client-ca.pem")
    }

    /// Puts `pki`'s server certificate and key in place, certificate first (as a careless
    /// rotation would: a check between the two sees a mismatched pair).
    fn serve(&self, pki: &Pki) {
        std::fs::copy(pki.server_cert(), self.cert()).expect("copy certificate");
        std::fs::copy(pki.server_key(), self.key()).expect("copy key");
    }

    /// The origin's settings for these files (mutual TLS when `mutual`).
    fn env(&self, mutual: bool, reload_ms: &str) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("TLS_CERT_FILE", self.cert().display().to_string()),
            ("TLS_KEY_FILE", self.key().display().to_string()),
            ("TLS_RELOAD_INTERVAL_MS", reload_ms.to_owned()),
        ];
        if mutual {
            env.push(("TLS_CLIENT_CA_FILE", self.client_ca().display().to_string()));
        }
        env
    }
}

/// The DER of the first certificate of a PEM file.
fn leaf_der(path: &Path) -> Vec<u8> {
    CertificateDer::pem_file_iter(path)
        .expect("read PEM")
        .next()
        .expect("a certificate")
        .expect("valid PEM")
        .to_vec()
}

/// A client trusting the CAs of `trusted`, presenting `identity`'s client certificate if any.
fn connector(trusted: &[&Pki], identity: Option<&Pki>) -> TlsConnector {
    origin::tls::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for pki in trusted {
        for ca in CertificateDer::pem_file_iter(pki.ca()).expect("read CA") {
            roots.add(ca.expect("CA PEM")).expect("trust anchor");
        }
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(pki) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(pki.client_cert())
                    .expect("read client certificate")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("client certificate PEM"),
                PrivateKeyDer::from_pem_file(pki.client_key()).expect("client key"),
            )
            .expect("client identity"),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

async fn connect(port: u16, connector: &TlsConnector) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    let name = ServerName::try_from("localhost").expect("server name");
    tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .map_err(|_| std::io::Error::other("handshake timed out"))?
}

/// The certificate the server presented on `stream`.
fn served(stream: &TlsStream<TcpStream>) -> Vec<u8> {
    stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .expect("a server certificate")
        .to_vec()
}

/// `GET path` on a kept-alive connection: the status and body, or the error that ended it.
async fn get(stream: &mut TlsStream<TcpStream>, path: &str) -> std::io::Result<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    stream.flush().await?;
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_string();
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                if buf.len() >= end + 4 + length {
                    let status = head
                        .split_whitespace()
                        .nth(1)
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + length]);
                    return Ok((status, body.to_string()));
                }
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "closed before an answer",
                ));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .map_err(|_| std::io::Error::other("no answer within 10 s"))?
}

/// An origin with its HTTPS listener on a free port: (plain base URL, HTTPS port, metrics).
/// These tests read `/healthz` only, so its database pool is a lazy one that never connects
/// (no database to create and drop per test) and the background work is off.
async fn https_origin(
    env: &[(&'static str, String)],
) -> (String, u16, Arc<origin::metrics::Metrics>) {
    let mut overrides: Vec<(&str, &str)> = vec![
        ("TLS_LISTEN_ADDR", "127.0.0.1:0"),
        ("RECONCILE_INTERVAL_SECS", "0"),
    ];
    overrides.extend(env.iter().map(|(k, v)| (*k, v.as_str())));
    let unused = "postgres://postgres@127.0.0.1:1/unused";
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy(unused)
        .expect("lazy pool");
    let app = Application::build_with_pool(helpers::settings("tls-listener", &overrides), pool)
        .await
        .expect("app builds");
    let port = app.tls_port().expect("the HTTPS listener is on");
    let base = format!("http://127.0.0.1:{}", app.port());
    let metrics = app.state().metrics.clone();
    tokio::spawn(app.run_until(std::future::pending()));
    (base, port, metrics)
}

fn closed_for(metrics: &origin::metrics::Metrics, reason: &'static str) -> u64 {
    metrics
        .http_closed
        .get_or_create(&origin::metrics::CloseLabels { reason })
        .get()
}

fn reloads(metrics: &origin::metrics::Metrics, result: &'static str) -> u64 {
    metrics
        .tls_reloads
        .get_or_create(&origin::metrics::TlsReloadLabels { result })
        .get()
}

/// Whether a connection attempt with `connector` gets an HTTP answer at all.
async fn answered(port: u16, connector: &TlsConnector) -> Result<u16, String> {
    let mut stream = connect(port, connector)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    get(&mut stream, "/healthz")
        .await
        .map(|(status, _)| status)
        .map_err(|e| format!("request: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_serves_only_clients_with_a_certificate_of_the_configured_ca() {
    let pki = Pki::generate("listener");
    let stranger = Pki::generate("stranger");
    let files = ServedFiles::of(&pki);
    let (base, port, metrics) = https_origin(&files.env(true, "0")).await;

    // The edge's certificate: served, over TLS, with the server certificate of the files.
    let edge = connector(&[&pki], Some(&pki));
    let mut stream = connect(port, &edge)
        .await
        .expect("handshake with a certificate");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(served(&stream), leaf_der(&files.cert()));
    assert_eq!(
        get(&mut stream, "/healthz").await.expect("answer"),
        (200, "ok".to_owned())
    );

    // No certificate, or one of another CA: the handshake fails and nothing is answered.
    let refused_before = closed_for(&metrics, "tls_handshake");
    for (who, client) in [
        ("no certificate", connector(&[&pki], None)),
        ("another CA's", connector(&[&pki], Some(&stranger))),
    ] {
        let outcome = answered(port, &client).await;
        assert!(outcome.is_err(), "{who}: answered {outcome:?}");
    }
    // Plain HTTP to the HTTPS port is no answer either.
    let mut plain = TcpStream::connect(("127.0.0.1", port)).await.expect("tcp");
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut reply)).await;
    assert!(
        !reply.starts_with(b"HTTP/"),
        "plain HTTP answered on the HTTPS port: {:?}",
        String::from_utf8_lossy(&reply)
    );
    assert!(
        closed_for(&metrics, "tls_handshake") >= refused_before + 3,
        "each refused handshake is counted"
    );

    // The kept-alive edge connection is unaffected, and the plain listener still serves.
    assert_eq!(get(&mut stream, "/healthz").await.expect("answer").0, 200);
    let plain = reqwest::get(format!("{base}/healthz"))
        .await
        .expect("plain");
    assert_eq!(plain.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_after_reload_and_open_connections_survive() {
    let first = Pki::generate("first");
    let second = Pki::generate("second");
    let files = ServedFiles::of(&first);
    // Mutual TLS with the first CA throughout: only the server's pair rotates.
    let (_, port, metrics) = https_origin(&files.env(true, "100")).await;
    let client = connector(&[&first, &second], Some(&first));

    let mut open = connect(port, &client).await.expect("handshake");
    let first_leaf = leaf_der(&first.server_cert());
    assert_eq!(served(&open), first_leaf);
    assert_eq!(get(&mut open, "/healthz").await.expect("answer").0, 200);

    files.serve(&second);
    let second_leaf = leaf_der(&second.server_cert());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let fresh = connect(port, &client)
            .await
            .expect("handshake during rotation");
        if served(&fresh) == second_leaf {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rotated certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reloads(&metrics, "loaded") >= 1);

    // The connection made before the reload still answers, with the certificate it was made
    // with.
    assert_eq!(served(&open), first_leaf);
    assert_eq!(get(&mut open, "/healthz").await.expect("answer").0, 200);

    // A broken file: refused, counted, and the second certificate goes on serving.
    let failed_before = reloads(&metrics, "failed");
    std::fs::write(files.cert(), "-----BEGIN CERTIFICATE-----\nbroken\n").expect("write");
    let deadline = Instant::now() + Duration::from_secs(15);
    while reloads(&metrics, "failed") == failed_before {
        assert!(Instant::now() < deadline, "the broken file was never seen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut after = connect(port, &client).await.expect("handshake");
    assert_eq!(served(&after), second_leaf);
    assert_eq!(get(&mut after, "/healthz").await.expect("answer").0, 200);
    assert_eq!(get(&mut open, "/healthz").await.expect("answer").0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_https_listener_keeps_the_servers_bounds() {
    let pki = Pki::generate("bounds");
    let files = ServedFiles::of(&pki);
    let mut env = files.env(false, "0");
    env.push(("HTTP_MAX_CONNECTIONS", "2".to_owned()));
    env.push(("HTTP_HEADER_READ_TIMEOUT_MS", "3000".to_owned()));
    let (_, port, metrics) = https_origin(&env).await;
    let client = connector(&[&pki], None);

    // Two sockets that never start a handshake fill the cap; a real client is still served
    // at once (well within the 3 s header deadline): the silent ones are evicted for it.
    let mut silent = Vec::new();
    for _ in 0..2 {
        silent.push(TcpStream::connect(("127.0.0.1", port)).await.expect("tcp"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let mut served_client = connect(port, &client).await.expect("handshake at the cap");
    assert_eq!(
        get(&mut served_client, "/healthz").await.expect("answer").0,
        200
    );
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "served after {:?}: it waited for a header timeout",
        started.elapsed()
    );
    assert!(
        closed_for(&metrics, "evicted") >= 1,
        "a silent socket was evicted"
    );
    drop(served_client);
    drop(silent);

    // A client that completes the handshake and trickles half a head, and a socket that never
    // sends a handshake, are cut off at the header deadline, like on the plain listener.
    let timeouts_before = closed_for(&metrics, "header_timeout");
    let mut slow = connect(port, &client).await.expect("handshake");
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: loc")
        .await
        .expect("half a head");
    slow.flush().await.expect("flush");
    let mut quiet = TcpStream::connect(("127.0.0.1", port)).await.expect("tcp");
    let (mut rest, mut nothing) = (Vec::new(), Vec::new());
    let (slow_ended, quiet_ended) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(15), slow.read_to_end(&mut rest)),
        tokio::time::timeout(Duration::from_secs(15), quiet.read_to_end(&mut nothing)),
    );
    assert!(slow_ended.is_ok(), "a trickled head was never cut off");
    assert!(
        rest.is_empty(),
        "answered: {:?}",
        String::from_utf8_lossy(&rest)
    );
    assert!(quiet_ended.is_ok(), "a silent socket was never dropped");
    assert!(closed_for(&metrics, "header_timeout") >= timeouts_before + 2);
}

#[sqlx::test(migrations = "./migrations")]
async fn the_binary_reloads_its_certificate_on_sighup(pool: PgPool) {
    let first = Pki::generate("hup-first");
    let second = Pki::generate("hup-second");
    let files = ServedFiles::of(&first);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    // No periodic check: only SIGHUP reloads.
    let mut env = files.env(false, "0");
    env.push(("TLS_LISTEN_ADDR", listen));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let process = OriginProcess::start_on(&pool, "redis://127.0.0.1:6379", &env).await;
    let client = connector(&[&first, &second], None);
    let mut open = connect(port, &client).await.expect("handshake");
    assert_eq!(served(&open), leaf_der(&first.server_cert()));

    files.serve(&second);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let unchanged = connect(port, &client).await.expect("handshake");
    assert_eq!(
        served(&unchanged),
        leaf_der(&first.server_cert()),
        "reloaded without a signal"
    );

    process.signal("-HUP");
    let second_leaf = leaf_der(&second.server_cert());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let fresh = connect(port, &client)
            .await
            .expect("handshake after SIGHUP");
        if served(&fresh) == second_leaf {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload the certificate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The process lives on (SIGHUP does not stop it) and the old connection still answers.
    assert_eq!(get(&mut open, "/healthz").await.expect("answer").0, 200);
    let ready = reqwest::get(format!("{}/readyz", process.base))
        .await
        .expect("plain listener");
    assert_eq!(ready.status(), 200);
}
