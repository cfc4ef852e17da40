//! `GET /warmup?sku=A&sku=B…`: ops prime the cache and the sold-out facts before a sale. The
//! admin token check, the query parsing and the report live here; the adapter does the fetching.

use serde::Serialize;
use shared::{BearerTokens, ErrorCode, Sku};

use crate::jwt;
use crate::reply::Reply;

/// Most SKUs one warmup may name (each is one origin subrequest).
pub const MAX_SKUS: usize = 50;

/// Whether `authorization` is `Bearer <one of the admin tokens>`, compared in constant time.
pub fn authorized(authorization: Option<&str>, admin_tokens: &BearerTokens) -> bool {
    jwt::bearer_token(authorization).is_ok_and(|given| admin_tokens.accepts(given))
}

/// The 401 of `/warmup`.
pub fn unauthorized() -> Reply {
    Reply::problem(
        ErrorCode::Unauthorized,
        "a valid admin bearer token is required",
    )
    .with_header("www-authenticate", "Bearer")
}

/// The SKUs named by the query's `sku` parameters, de-duplicated in order.
pub fn skus(query: &[(String, String)]) -> Result<Vec<Sku>, Reply> {
    let mut out: Vec<Sku> = Vec::new();
    for (name, value) in query {
        if name != "sku" {
            continue;
        }
        let sku = Sku::parse(value).map_err(|e| {
            Reply::problem(ErrorCode::InvalidRequest, format!("sku {value:?}: {e}"))
        })?;
        if !out.contains(&sku) {
            out.push(sku);
        }
    }
    if out.is_empty() {
        return Err(Reply::problem(
            ErrorCode::InvalidRequest,
            "name at least one ?sku= to warm",
        ));
    }
    if out.len() > MAX_SKUS {
        return Err(Reply::problem(
            ErrorCode::InvalidRequest,
            format!("at most {MAX_SKUS} skus per warmup"),
        ));
    }
    Ok(out)
}

/// The `200` body of a warmup.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(utoipa::ToSchema), schema(as = WarmupReport))]
pub struct Report {
    /// SKUs fetched and cached.
    pub warmed: Vec<String>,
    /// SKUs the origin does not know.
    pub missing: Vec<String>,
    /// Of `warmed`, those with no stock left (the edge now answers `sold_out` for them).
    pub sold_out: Vec<String>,
}

impl Report {
    pub fn to_reply(&self) -> Reply {
        let body = serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"));
        Reply::json(200, body).with_header("cache-control", "no-store")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_token_must_match_exactly() {
        let tok = BearerTokens::parse("tok", 1).expect("tokens");
        assert!(authorized(Some("Bearer tok"), &tok));
        assert!(!authorized(Some("Bearer tok2"), &tok));
        assert!(!authorized(Some("Bearer to"), &tok));
        assert!(!authorized(Some("tok"), &tok));
        assert!(!authorized(None, &tok));
        // During a rotation, the new and the old token both work.
        let both = BearerTokens::parse("new-tok,tok", 1).expect("tokens");
        assert!(authorized(Some("Bearer tok"), &both));
        assert!(authorized(Some("Bearer new-tok"), &both));
        assert!(!authorized(Some("Bearer new-tok,tok"), &both));
        assert_eq!(unauthorized().code(), Some(ErrorCode::Unauthorized));
    }

    #[test]
    fn query_skus() {
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let got = skus(&q(&[("sku", "A"), ("x", "1"), ("sku", "B"), ("sku", "A")])).expect("valid");
        assert_eq!(got.iter().map(Sku::as_str).collect::<Vec<_>>(), ["A", "B"]);
        assert!(skus(&q(&[])).is_err());
        assert!(skus(&q(&[("sku", "a b")])).is_err());
        let many: Vec<(String, String)> = (0..=MAX_SKUS)
            .map(|i| ("sku".to_owned(), format!("S{i}")))
            .collect();
        assert!(skus(&many).is_err());
    }

    #[test]
    fn report_shape() {
        let r = Report {
            warmed: vec!["A".into()],
            missing: vec!["B".into()],
            sold_out: vec![],
        }
        .to_reply();
        assert_eq!(r.body, r#"{"warmed":["A"],"missing":["B"],"sold_out":[]}"#);
    }
}
