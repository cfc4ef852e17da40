//! The origin's order events (issue 34) never reach a shopper through the edge: the feed, one
//! event, and the webhook endpoints' admin API are no route of the edge (it answers them 404
//! itself, without an origin call), whatever the method.

use edge::routes::{Route, route};

#[test]
fn the_event_feed_and_the_webhook_admin_api_are_not_routed() {
    for path in [
        "/v1/events",
        "/v1/events/evt_0192e1c3a5f07c2d9e4b8a1f3c6d5e7f",
        "/v1/admin/webhooks",
        "/v1/admin/webhooks/0192f1c2-7b3a-7c4d-9e8f-0123456789ab",
        "/v1/admin/webhooks/0192f1c2-7b3a-7c4d-9e8f-0123456789ab/replay",
    ] {
        for method in ["GET", "HEAD", "POST", "PATCH", "DELETE"] {
            assert_eq!(route(method, path), Route::NotFound, "{method} {path}");
        }
    }
}
