//! Reading the JSON bodies of the contract: [`BodyError`], why a body is not acceptable (always a
//! 400 `invalid_request`, its `Display` a client-safe `detail`), and the field readers the bodies'
//! parsers share (`crate::wire`, `crate::sku_put`, `crate::defence`).

use serde_json::Value;

use crate::domain::DomainError;
use crate::schedule::Update;

/// Why a JSON body is not acceptable (always a 400 `invalid_request`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    #[error("body is not valid JSON: {0}")]
    Json(String),
    #[error("body must be a JSON object")]
    NotAnObject,
    #[error("field `{0}` is required")]
    Missing(&'static str),
    #[error("field `{field}`: {reason}")]
    Field { field: &'static str, reason: String },
    #[error(transparent)]
    Domain(#[from] DomainError),
}

pub(crate) fn object(body: &[u8]) -> Result<serde_json::Map<String, Value>, BodyError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(BodyError::NotAnObject),
        Err(e) => Err(BodyError::Json(e.to_string())),
    }
}

pub(crate) fn required<'a>(
    map: &'a serde_json::Map<String, Value>,
    field: &'static str,
) -> Result<&'a Value, BodyError> {
    map.get(field).ok_or(BodyError::Missing(field))
}

/// An optional object setting of an admin body: absent keeps, `null` clears, an object is read
/// by `parse`; anything else is refused with `reason`.
pub(crate) fn setting<T>(
    map: &serde_json::Map<String, Value>,
    field: &'static str,
    reason: &str,
    parse: impl Fn(&serde_json::Map<String, Value>) -> Result<T, BodyError>,
) -> Result<Update<T>, BodyError> {
    match map.get(field) {
        None => Ok(Update::Keep),
        Some(Value::Null) => Ok(Update::Clear),
        Some(Value::Object(object)) => parse(object).map(Update::Set),
        Some(_) => Err(BodyError::Field {
            field,
            reason: reason.into(),
        }),
    }
}
