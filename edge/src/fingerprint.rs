//! Request fingerprints: what makes two purchase attempts under one idempotency key "the same
//! request". Per the contract that is the *parsed* request (`sku`, `qty`), so whitespace, field
//! order and unknown extra fields do not make a body different. The fingerprint is the SHA-256 of
//! the canonical JSON the edge also forwards to the origin.

use shared::PurchaseRequest;
use shared::signing::sha256_hex;

/// Lower-case hex SHA-256 of the canonical form of `request`.
pub fn of(request: &PurchaseRequest) -> String {
    sha256_hex(canonical_body(request).as_bytes())
}

/// The canonical JSON body of `request`: `{"sku":"…","qty":n}`. This is what the edge forwards.
pub fn canonical_body(request: &PurchaseRequest) -> String {
    request.to_json()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(body: &str) -> String {
        of(&PurchaseRequest::from_json(body.as_bytes()).expect("valid body"))
    }

    #[test]
    fn formatting_order_and_extra_fields_do_not_matter() {
        let a = fp(r#"{"sku":"A","qty":2}"#);
        assert_eq!(a, fp(r#"{ "qty" : 2 , "sku" : "A" }"#));
        assert_eq!(a, fp(r#"{"sku":"A","qty":2,"note":"gift"}"#));
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn sku_and_qty_do() {
        let a = fp(r#"{"sku":"A","qty":2}"#);
        assert_ne!(a, fp(r#"{"sku":"A","qty":3}"#));
        assert_ne!(a, fp(r#"{"sku":"B","qty":2}"#));
    }
}
