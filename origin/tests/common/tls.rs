//! TLS fixtures for tests: a throwaway CA with a server certificate (for `localhost` and
//! `127.0.0.1`) and a client certificate, generated in-process with rcgen and written as PEM
//! files to a temporary directory; and `redis-server` processes that speak only TLS
//! (`--port 0 --tls-port <free>`), killed on drop.
//!
//! Include it with `#[path = "common/tls.rs"] mod tls;`.
#![allow(dead_code)] // each test binary uses its own subset

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A CA and certificates it signed, as PEM files.
#[derive(Debug)]
pub(crate) struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// Generates a CA named `name`, a server certificate and a client certificate.
    pub(crate) fn generate(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("flashgate-pki-")
            .tempdir()
            .expect("tempdir for certificates");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("Flashgate test CA {name}"));
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().expect("CA key");
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");

        let leaf = |cn: &str, usage: ExtendedKeyUsagePurpose| {
            let mut params =
                CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                    .expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = vec![usage];
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            let key = KeyPair::generate().expect("leaf key");
            let cert = params.signed_by(&key, &ca).expect("leaf certificate");
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf("localhost", ExtendedKeyUsagePurpose::ServerAuth);
        let (client_cert, client_key) =
            leaf("flashgate-origin", ExtendedKeyUsagePurpose::ClientAuth);
        let write = |file: &str, pem: &str| {
            std::fs::write(dir.path().join(file), pem).expect("write PEM");
        };
        write("ca.pem", &ca.pem());
        write("server.pem", &server_cert);
        write("server.key", &server_key);
        write("client.pem", &client_cert);
        write("client.key", &client_key);
        Self { dir }
    }

    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    pub(crate) fn server_cert(&self) -> PathBuf {
        self.dir.path().join("server.pem")
    }

    pub(crate) fn server_key(&self) -> PathBuf {
        self.dir.path().join("server.key")
    }

    pub(crate) fn client_cert(&self) -> PathBuf {
        self.dir.path().join("client.pem")
    }

    pub(crate) fn client_key(&self) -> PathBuf {
        self.dir.path().join("client.key")
    }
}

/// `redis-server` processes listening only on a TLS port.
#[derive(Debug)]
pub(crate) struct TlsRedis {
    nodes: Vec<(u16, Child)>,
    _dir: tempfile::TempDir,
}

impl TlsRedis {
    /// Starts `count` servers presenting `pki`'s server certificate; with `mutual`, clients
    /// must present a certificate signed by `pki`'s CA.
    pub(crate) async fn start(count: usize, pki: &Pki, mutual: bool) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("redis-tls-")
            .tempdir()
            .expect("tempdir");
        let mut nodes = Vec::with_capacity(count);
        for index in 0..count {
            let node_dir = dir.path().join(format!("node-{index}"));
            std::fs::create_dir_all(&node_dir).expect("node dir");
            nodes.push(start_one(&node_dir, pki, mutual).await);
        }
        Self { nodes, _dir: dir }
    }

    /// `rediss://127.0.0.1:<port>/` of every node.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|(port, _)| format!("rediss://127.0.0.1:{port}/"))
            .collect()
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        for (_, child) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn start_one(dir: &Path, pki: &Pki, mutual: bool) -> (u16, Child) {
    let mut last = String::new();
    for _ in 0..10 {
        let port = free_port();
        let mut child = Command::new(server_binary())
            .args(["--port", "0"])
            .arg("--tls-port")
            .arg(port.to_string())
            .arg("--tls-cert-file")
            .arg(pki.server_cert())
            .arg("--tls-key-file")
            .arg(pki.server_key())
            .arg("--tls-ca-cert-file")
            .arg(pki.ca())
            .args(["--tls-auth-clients", if mutual { "yes" } else { "no" }])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--protected-mode", "no"])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                last = format!(
                    "port {port}: exited {status}: {}",
                    std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default()
                );
                break;
            }
            // Listening is enough: the server binds once it is ready.
            if TcpStream::connect_timeout(
                &([127, 0, 0, 1], port).into(),
                Duration::from_millis(200),
            )
            .is_ok()
            {
                return (port, child);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                last = format!("port {port}: not listening within 20 s");
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    panic!("could not start a TLS redis-server: {last}");
}

fn server_binary() -> PathBuf {
    std::env::var_os("REDIS_SERVER").map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}
