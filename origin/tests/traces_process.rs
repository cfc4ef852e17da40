//! Traces (issue 38) with the whole `origin` binary: its spans are exported with OTLP over HTTP
//! to a real OTLP/HTTP receiver run by this test (an axum server decoding the protobuf
//! `ExportTraceServiceRequest`), on a real Postgres and a `redis-server` of its own.
//!
//! - a purchase continues the caller's W3C trace: the request span is the child of the caller's
//!   span, and parents the `batch` span, whose children are the `lease` acquisition and then the
//!   `commit`; concurrent purchases are each parented or linked by the batch that decided them;
//!   a malformed `traceparent` starts a new trace; probes and scrapes make no span;
//! - a collector that hangs or refuses never fails or holds up a purchase.

#[path = "common/processes.rs"]
mod processes;
#[path = "../../redlock/tests/common/redis_nodes.rs"]
mod redis_nodes;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use futures::future::join_all;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use processes::{EDGE_SECRET, OriginProcess, put_sku, signed_purchase};
use prost::Message;
use redis_nodes::RedisNodes;
use sqlx::PgPool;

/// One received span, flattened.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    name: String,
    kind: i32,
    trace_id: String,
    span_id: String,
    parent: String,
    start: u64,
    end: u64,
    attributes: HashMap<String, String>,
    /// (trace id, span id) of each link.
    links: Vec<(String, String)>,
}

fn value(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), value(&kv.value)))
        .collect()
}

/// The OTLP/HTTP receiver: `POST /v1/traces` with a protobuf body.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Got>>>,
    /// Content types the exports came with.
    content_types: Arc<Mutex<Vec<String>>>,
}

async fn receive(
    State(rx): State<Receiver>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, Vec<u8>) {
    let Ok(export) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    rx.content_types.lock().expect("lock").push(
        headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
    );
    let mut got = Vec::new();
    for rs in export.resource_spans {
        let resource = rs
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                got.push(Got {
                    service: service.clone(),
                    name: s.name,
                    kind: s.kind,
                    trace_id: hex::encode(&s.trace_id),
                    span_id: hex::encode(&s.span_id),
                    parent: hex::encode(&s.parent_span_id),
                    start: s.start_time_unix_nano,
                    end: s.end_time_unix_nano,
                    attributes: attributes(&s.attributes),
                    links: s
                        .links
                        .iter()
                        .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                        .collect(),
                });
            }
        }
    }
    rx.spans.lock().expect("lock").extend(got);
    (
        StatusCode::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

impl Receiver {
    /// Serves on a free port; the base URL (what `OTEL_EXPORTER_OTLP_ENDPOINT` names).
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().expect("addr");
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(receive))
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().expect("lock").clone()
    }

    /// Waits (up to 15 s) until `done` holds for the spans received.
    async fn wait_for(&self, what: &str, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let start = Instant::now();
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{what}: not received within 15 s; got {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

const SERVER: i32 = 2; // SPAN_KIND_SERVER

fn one<'a>(spans: &'a [Got], what: &str, pred: impl Fn(&Got) -> bool) -> &'a Got {
    let found: Vec<&Got> = spans.iter().filter(|s| pred(s)).collect();
    assert_eq!(found.len(), 1, "{what}: {found:#?}\nall: {spans:#?}");
    found[0]
}

/// An origin exporting to `endpoint`, logging at `info` to `log`.
async fn traced_origin(pool: &PgPool, urls: &str, endpoint: &str, log: &Path) -> OriginProcess {
    let (db, url) = processes::database_of(pool).await;
    OriginProcess::start_logged(
        &url,
        urls,
        &format!("test:{db}"),
        &[
            ("RUN_MIGRATIONS", "false"),
            ("RECONCILE_INTERVAL_SECS", "0"),
            ("RUST_LOG", "info"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_SERVICE_NAME", "origin-under-test"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_TRACES_SAMPLER", "parentbased_always_on"),
        ],
        log,
    )
    .await
}

#[sqlx::test(migrations = "./migrations")]
async fn a_purchase_continues_the_callers_trace_through_batch_lease_and_commit(pool: PgPool) {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let nodes = RedisNodes::start(1).await;
    let logs = tempfile::NamedTempFile::new().expect("log file");
    let origin = traced_origin(&pool, &nodes.urls().join(","), &endpoint, logs.path()).await;
    let client = processes::http_client(32, Duration::from_secs(10));
    put_sku(&client, &origin.base, "TR-1", 100, 5).await;
    // Probes and scrapes, which must not be traced.
    for path in ["/healthz", "/readyz", "/metrics"] {
        let res = client
            .get(format!("{}{path}", origin.base))
            .header(
                "traceparent",
                "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01",
            )
            .send()
            .await
            .expect("probe");
        assert_eq!(res.status(), 200, "{path}");
    }

    // The shopper's trace, as the edge forwards it.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let res = signed_purchase(&client, &origin.base, EDGE_SECRET, ("alice", "k1", "TR-1"))
        .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
        .header("tracestate", "shop=1")
        .header("flashgate-request-id", "req-traced-1")
        .send()
        .await
        .expect("purchase");
    assert_eq!(res.status(), 201);
    assert_eq!(res.headers()["flashgate-request-id"], "req-traced-1");

    let spans = receiver
        .wait_for(
            "the purchase's request, batch, lease and commit spans",
            |spans| {
                let of_trace = spans.iter().filter(|s| s.trace_id == trace_id);
                of_trace.map(|s| s.name.as_str()).collect::<Vec<_>>().len() >= 4
            },
        )
        .await;
    let of_trace: Vec<Got> = spans
        .iter()
        .filter(|s| s.trace_id == trace_id)
        .cloned()
        .collect();
    let request = one(&of_trace, "request span", |s| {
        s.name == "POST /v1/purchases"
    });
    assert_eq!(
        request.parent, caller_span,
        "the caller's span is the parent"
    );
    assert_eq!(request.kind, SERVER);
    assert_eq!(request.service, "origin-under-test");
    assert_eq!(request.attributes["flashgate.request_id"], "req-traced-1");
    assert_eq!(request.attributes["http.route"], "/v1/purchases");
    assert_eq!(request.attributes["http.response.status_code"], "201");
    let batch = one(&of_trace, "batch span", |s| s.name == "batch");
    assert_eq!(
        batch.parent, request.span_id,
        "the request parents its batch"
    );
    assert_eq!(batch.attributes["flashgate.sku"], "TR-1");
    assert_eq!(batch.attributes["flashgate.batch.size"], "1");
    assert_eq!(
        request.attributes["flashgate.batch.id"], batch.attributes["flashgate.batch.id"],
        "the request names its batch"
    );
    let lease = one(&of_trace, "lease span", |s| s.name == "lease");
    assert_eq!(lease.parent, batch.span_id);
    assert_eq!(lease.attributes["lease.op"], "acquire");
    let commit = one(&of_trace, "commit span", |s| s.name == "commit");
    assert_eq!(commit.parent, batch.span_id);
    assert_eq!(
        commit.attributes["flashgate.batch.id"],
        batch.attributes["flashgate.batch.id"]
    );
    assert!(
        lease.end <= commit.start,
        "the lease is taken before the commit"
    );
    // The batch starts within the request, and the request is answered after the commit (the
    // batch may end later: it learns from the sell-out after answering).
    assert!(request.start <= batch.start, "{request:?} {batch:?}");
    assert!(commit.end <= request.end, "{request:?} {commit:?}");
    assert!(
        receiver
            .content_types
            .lock()
            .expect("lock")
            .iter()
            .all(|c| c == "application/x-protobuf")
    );

    // A malformed traceparent starts a new trace; the purchase is not refused.
    let bogus = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01";
    let res = signed_purchase(&client, &origin.base, EDGE_SECRET, ("bob", "k1", "TR-1"))
        .header("traceparent", bogus)
        .header("flashgate-request-id", "req-bogus")
        .send()
        .await
        .expect("purchase");
    assert_eq!(res.status(), 201);
    let spans = receiver
        .wait_for("the bogus-traceparent request span", |spans| {
            spans.iter().any(|s| {
                s.attributes.get("flashgate.request_id").map(String::as_str) == Some("req-bogus")
            })
        })
        .await;
    let fresh = one(&spans, "bogus request", |s| {
        s.attributes.get("flashgate.request_id").map(String::as_str) == Some("req-bogus")
    });
    assert!(fresh.parent.is_empty(), "a new trace: {fresh:?}");
    assert_ne!(fresh.trace_id, trace_id);
    assert_ne!(fresh.trace_id, "0".repeat(32));

    // Twenty shoppers at once, each in a trace of their own: every one's request span is
    // continued, and the batch that decided it is its child or links to it.
    let traces: Vec<String> = (0..20_u64)
        .map(|i| format!("{:032x}", 0xc0ff_ee00_u64 + i))
        .collect();
    let answers = join_all(traces.iter().enumerate().map(|(i, t)| {
        let client = &client;
        let base = &origin.base;
        async move {
            signed_purchase(client, base, EDGE_SECRET, (&format!("u{i}"), "k", "TR-1"))
                .header("traceparent", format!("00-{t}-{:016x}-01", i + 1))
                .send()
                .await
                .expect("purchase")
                .status()
        }
    }))
    .await;
    assert!(answers.iter().all(|s| *s == 201), "{answers:?}");
    let spans = receiver
        .wait_for("the twenty request spans and their batches", |spans| {
            traces.iter().all(|t| {
                spans
                    .iter()
                    .any(|s| &s.trace_id == t && s.name == "POST /v1/purchases")
            }) && {
                let ids: Vec<&String> = spans
                    .iter()
                    .filter(|s| traces.contains(&s.trace_id) && s.name == "POST /v1/purchases")
                    .filter_map(|s| s.attributes.get("flashgate.batch.id"))
                    .collect();
                ids.iter().all(|id| {
                    spans.iter().any(|s| {
                        s.name == "batch" && s.attributes.get("flashgate.batch.id") == Some(id)
                    })
                })
            }
        })
        .await;
    let mut linked = 0;
    for (i, t) in traces.iter().enumerate() {
        let request = one(&spans, "a concurrent request", |s| {
            &s.trace_id == t && s.name == "POST /v1/purchases"
        });
        assert_eq!(request.parent, format!("{:016x}", i + 1));
        let id = &request.attributes["flashgate.batch.id"];
        let batch = one(&spans, "its batch", |s| {
            s.name == "batch" && s.attributes.get("flashgate.batch.id") == Some(id)
        });
        let parented = batch.trace_id == *t && batch.parent == request.span_id;
        let links = batch
            .links
            .contains(&(request.trace_id.clone(), request.span_id.clone()));
        assert!(
            parented ^ links,
            "parented or linked, once: {request:?} {batch:?}"
        );
        linked += usize::from(links);
    }
    // How many were decided by another request's batch (depends on timing; printed).
    println!("{linked} of 20 concurrent purchases were linked from another request's batch");

    // The logs are as without traces: the audit event under its `request` log span (with the
    // request id), no trace span in them.
    let log = std::fs::read_to_string(logs.path()).expect("read log");
    let decided = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| {
            e["message"] == "purchase decided"
                && e["spans"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s["request_id"] == "req-traced-1"))
        });
    assert!(
        decided.is_some(),
        "no audit event under req-traced-1:\n{log}"
    );
    assert!(!log.contains("otel."), "{log}");
    let trace_spans_logged = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["spans"].as_array().is_some_and(|spans| {
                spans.iter().any(|s| {
                    ["batch", "lease", "commit"].contains(&s["name"].as_str().unwrap_or_default())
                        || s.get("http.route").is_some()
                })
            })
        })
        .count();
    assert_eq!(trace_spans_logged, 0, "{log}");

    // No probe or scrape made a span.
    let spans = receiver.spans();
    assert!(
        spans.iter().all(|s| {
            s.trace_id != "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                && !["/healthz", "/readyz", "/metrics"]
                    .iter()
                    .any(|p| s.attributes.get("http.route").map(String::as_str) == Some(p))
        }),
        "{spans:#?}"
    );
}

/// A listener that accepts connections and never answers: an export to it hangs until the
/// exporter's timeout.
/// Also counts the connections it accepted.
async fn black_hole() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::Relaxed);
            held.push(socket);
        }
    });
    (format!("http://{addr}"), accepted, task)
}

#[sqlx::test(migrations = "./migrations")]
async fn an_unreachable_collector_never_fails_or_holds_up_a_purchase(pool: PgPool) {
    let nodes = RedisNodes::start(1).await;
    let urls = nodes.urls().join(",");
    let (hanging, accepted, _task) = black_hole().await;
    let refused = format!("http://127.0.0.1:{}", processes::free_port());
    let client = processes::http_client(8, Duration::from_secs(10));
    for (what, endpoint) in [
        ("hanging", hanging.as_str()),
        ("refusing", refused.as_str()),
    ] {
        let origin = OriginProcess::start_on(
            &pool,
            &urls,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
                // Exports every 20 ms, each allowed 60 s: a hanging collector holds the
                // exporter for the whole test.
                ("OTEL_BSP_SCHEDULE_DELAY", "20"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000"),
                ("OTEL_BSP_MAX_QUEUE_SIZE", "16"),
            ],
        )
        .await;
        let sku = format!("UNREACH-{what}");
        put_sku(&client, &origin.base, &sku, 1000, 1000).await;
        // Sequential purchases for longer than several export periods: each is answered, and
        // none waits for an export (a purchase takes milliseconds here; an export, 60 s).
        for i in 0..40 {
            let started = Instant::now();
            let user = format!("carol-{what}");
            let res = signed_purchase(
                &client,
                &origin.base,
                EDGE_SECRET,
                (&user, &format!("k{i}"), &sku),
            )
            .header(
                "traceparent",
                format!("00-{:032x}-00f067aa0ba902b7-01", 0xdead0000_u64 + i),
            )
            .send()
            .await
            .expect("purchase answered");
            assert_eq!(res.status(), 201, "{what} collector, purchase {i}");
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{what} collector, purchase {i} took {:?}",
                started.elapsed()
            );
        }
        let ready = client
            .get(format!("{}/readyz", origin.base))
            .send()
            .await
            .expect("readyz");
        assert_eq!(ready.status(), 200, "{what}");
    }
    // The exporter did try the hanging collector (and hangs on it still).
    assert!(
        accepted.load(Ordering::Relaxed) > 0,
        "no export was attempted"
    );
}
