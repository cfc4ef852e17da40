//! `GET /v1/orders/{order_id}` and the order actions `POST /v1/orders/{order_id}/pay`,
//! `/cancel`, `/refund`: parse, authenticate, then hand the action to the order service
//! (`crate::orders`), whose answer is written here.
//!
//! Who may call: the shop backend with an admin bearer token — any order, every action — and, for
//! the read and the cancellation only, a shopper through the edge, which signs the request like a
//! purchase (`Flashgate-Signature` over the method, the path, `Flashgate-User` and the body): a
//! shopper sees and cancels only their own orders, anyone else's is 404 `order_not_found`.
//! Checks in order — the extractors of each handler's signature (`super::extract`): credentials
//! (an admin token before any body byte is read), body size and deadline, order id (400
//! `invalid_request`), body, then the action.

use axum::Json;
use axum::extract::State;
use shared::{ErrorCode, OrderView, RefundRequest};

use super::AppState;
use super::extract::{AdminToken, Checked, OrderCaller, OrderId};
use super::refusals::{OrderActionRefusals, OrderReadRefusals, ShopOnly, ShopOrShopper};
use crate::orders::{OrderAction, OrderError, PaymentSource, Requester};
use crate::problem::ApiError;

/// The answer to an order error.
fn refusal(e: OrderError) -> ApiError {
    match e {
        OrderError::NotFound => ApiError::new(ErrorCode::OrderNotFound, "no such order"),
        OrderError::State { current } => ApiError::new(
            ErrorCode::OrderState,
            format!("the order is {current}: this action does not apply to it"),
        )
        .with_current(current.as_str()),
        e if e.is_unavailable() => ApiError::unavailable(&e),
        e => ApiError::internal(&e),
    }
}

/// Applies `action` to order `id` for `who`: the order as it is afterwards.
async fn act(
    app: &AppState,
    id: uuid::Uuid,
    action: OrderAction,
    who: Requester,
) -> Result<Json<OrderView>, ApiError> {
    app.orders
        .apply(id, action, who)
        .await
        .map(Json)
        .map_err(refusal)
}

/// An order: its state, and when a hold expires.
#[utoipa::path(
    get, path = "/v1/orders/{order_id}", tag = "orders",
    params(("order_id" = String, Path, description = "The order id of the purchase's 201 (a UUID)")),
    security(("admin_token" = []), ("edge_signature" = [])),
    responses((status = 200, body = shared::OrderView), ShopOrShopper, OrderReadRefusals)
)]
pub(crate) async fn get(
    State(app): State<AppState>,
    OrderCaller { who, id }: OrderCaller,
) -> Result<Json<OrderView>, ApiError> {
    app.orders.get(id, &who).await.map(Json).map_err(refusal)
}

/// The shop recorded the payment of a hold (`held` → `paid`). A payment after the hold expired
/// takes a unit again if one is left (`paid`), else the order becomes `refund_due`.
#[utoipa::path(
    post, path = "/v1/orders/{order_id}/pay", tag = "orders",
    params(("order_id" = String, Path, description = "The order id of the purchase's 201 (a UUID)")),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The order now (a repeat answers the same and changes nothing)", body = shared::OrderView),
        ShopOnly, OrderActionRefusals,
    )
)]
pub(crate) async fn pay(
    State(app): State<AppState>,
    _: AdminToken,
    Checked(OrderId(id), ()): Checked<OrderId>,
) -> Result<Json<OrderView>, ApiError> {
    let action = OrderAction::Pay {
        source: PaymentSource::Api,
    };
    act(&app, id, action, Requester::Shop).await
}

/// Cancels a hold or a confirmed order; its units go back on sale, and the answer comes once
/// every origin process sells them (about one second after the commit).
#[utoipa::path(
    post, path = "/v1/orders/{order_id}/cancel", tag = "orders",
    params(("order_id" = String, Path, description = "The order id of the purchase's 201 (a UUID)")),
    security(("admin_token" = []), ("edge_signature" = [])),
    responses(
        (status = 200, description = "The order now (a repeat answers the same and changes nothing)", body = shared::OrderView),
        ShopOrShopper, OrderActionRefusals,
    )
)]
pub(crate) async fn cancel(
    State(app): State<AppState>,
    OrderCaller { who, id }: OrderCaller,
) -> Result<Json<OrderView>, ApiError> {
    act(&app, id, OrderAction::Cancel, who).await
}

/// Refunds a confirmed or paid order; with `"restock": true` its units go back on sale (the
/// answer then comes once every origin process sells them).
#[utoipa::path(
    post, path = "/v1/orders/{order_id}/refund", tag = "orders",
    params(("order_id" = String, Path, description = "The order id of the purchase's 201 (a UUID)")),
    request_body = shared::RefundRequest,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The order now (a repeat answers the same and changes nothing)", body = shared::OrderView),
        ShopOnly, OrderActionRefusals,
    )
)]
pub(crate) async fn refund(
    State(app): State<AppState>,
    _: AdminToken,
    Checked(OrderId(id), refund): Checked<OrderId, RefundRequest>,
) -> Result<Json<OrderView>, ApiError> {
    let action = OrderAction::Refund {
        restock: refund.restock,
    };
    act(&app, id, action, Requester::Shop).await
}
