//! HTTP tests of the origin: the real app on port 0, a fresh Postgres database per test
//! (`#[sqlx::test]`), the local Redis (keys namespaced per test database).

mod admin;
mod bad_input;
mod bot_defences;
mod concurrency;
mod contention;
mod events_feed;
mod events_stream;
mod faults;
mod helpers;
mod hostile;
mod limits;
mod lock_keys;
mod orders;
mod payment_batches;
mod payment_events;
mod payments;
#[path = "../common/probes.rs"]
mod probes;
#[path = "../common/processes.rs"]
mod processes;
mod purchases;
mod receiver;
mod reconcile;
#[path = "../../../redlock/tests/common/redis_nodes.rs"]
mod redis_nodes;
mod references;
mod restock;
mod rotation;
mod schedule;
mod service;
mod shutdown;
mod unknown_skus;
mod waiting_room;
mod webhook_consumers;
mod webhooks;
