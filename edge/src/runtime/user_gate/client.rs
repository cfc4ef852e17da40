//! The worker's handle on a shopper's `UserGate` object: the calls a purchase (`purchase`) and the
//! order routes (`limit`, `returned`) make, JSON over the stub's `fetch`.

use serde::de::DeserializeOwned;
use shared::UserId;
use worker::wasm_bindgen::JsValue;
use worker::{Env, Error, Method, Request, RequestInit, Stub};

use crate::protocol::{
    LIMIT_PATH, LimitRequest, PURCHASE_PATH, PurchaseReply, PurchaseRequest, RETURNED_PATH,
    RateOutcome, ReturnedReply, ReturnedRequest,
};

use super::BINDING;

/// The worker's handle on one user's gate.
#[derive(Debug)]
pub(crate) struct UserGateClient {
    stub: Stub,
}

impl UserGateClient {
    pub(crate) fn for_user(env: &Env, user: &UserId) -> worker::Result<Self> {
        Ok(Self {
            stub: env.durable_object(BINDING)?.get_by_name(user.as_str())?,
        })
    }

    async fn call<T: DeserializeOwned>(&self, path: &str, body: String) -> worker::Result<T> {
        let mut init = RequestInit::new();
        init.with_method(Method::Post)
            .with_body(Some(JsValue::from_str(&body)));
        let request = Request::new_with_init(&format!("https://user-gate.internal{path}"), &init)?;
        let mut response = self.stub.fetch_with_request(request).await?;
        if response.status_code() != 200 {
            return Err(Error::RustError(format!(
                "user gate {path} answered {}",
                response.status_code()
            )));
        }
        response.json::<T>().await
    }

    /// The purchase attempt, in one call: `begin`, and for a claimed attempt the origin call and
    /// `finish` (see [`UserGate`]'s `purchase`).
    pub(crate) async fn purchase(&self, input: &PurchaseRequest) -> worker::Result<PurchaseReply> {
        self.call(PURCHASE_PATH, serde_json::to_string(input)?)
            .await
    }

    pub(crate) async fn limit(&self, input: &LimitRequest) -> worker::Result<RateOutcome> {
        self.call(LIMIT_PATH, serde_json::to_string(input)?).await
    }

    pub(crate) async fn returned(&self, input: &ReturnedRequest) -> worker::Result<ReturnedReply> {
        self.call(RETURNED_PATH, serde_json::to_string(input)?)
            .await
    }
}
