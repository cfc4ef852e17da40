//! Domain newtypes of the contract. Each has a private field and a `parse` constructor, so a
//! value of the type is valid by construction; handlers convert wire input exactly once.

use std::fmt;

use serde::{Serialize, Serializer};

/// Why a piece of input is not a valid domain value. The `Display` text is safe to show to the
/// client as the `detail` of a 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DomainError {
    #[error("sku must be 1..=64 characters of [A-Za-z0-9._-]")]
    InvalidSku,
    #[error("user must be 1..=64 characters of [A-Za-z0-9._:@-]")]
    InvalidUser,
    #[error("qty must be a JSON integer in 1..=100")]
    InvalidQuantity,
    #[error(
        "Idempotency-Key must be 1..=255 visible ASCII characters, or an sf-string \"...\" of them"
    )]
    InvalidIdempotencyKey,
}

fn is_sku_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

fn is_user_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'@' | b'-')
}

macro_rules! string_newtype {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// The validated value.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = DomainError;
            fn from_str(s: &str) -> Result<Self, DomainError> {
                Self::parse(s)
            }
        }
    };
}

string_newtype!(
    /// A stock-keeping unit id: 1..=64 characters of `[A-Za-z0-9._-]`.
    Sku
);
string_newtype!(
    /// A shopper id: 1..=64 characters of `[A-Za-z0-9._:@-]`.
    UserId
);
string_newtype!(
    /// A decoded idempotency key: 1..=255 visible ASCII characters (0x21..=0x7E). The bare form
    /// `abc` and the RFC 8941 sf-string form `"abc"` name the same key.
    IdempotencyKey
);

impl Sku {
    pub const MAX_LEN: usize = 64;

    pub fn parse(s: &str) -> Result<Self, DomainError> {
        let ok = (1..=Self::MAX_LEN).contains(&s.len()) && s.bytes().all(is_sku_char);
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(DomainError::InvalidSku)
        }
    }
}

impl UserId {
    pub const MAX_LEN: usize = 64;

    pub fn parse(s: &str) -> Result<Self, DomainError> {
        let ok = (1..=Self::MAX_LEN).contains(&s.len()) && s.bytes().all(is_user_char);
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(DomainError::InvalidUser)
        }
    }
}

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    /// Parses an `Idempotency-Key` header value. A value starting with `"` must be a complete
    /// RFC 8941 sf-string (escapes `\"` and `\\` only); it is decoded. Either way the key must be
    /// 1..=255 visible ASCII characters.
    pub fn parse(raw: &str) -> Result<Self, DomainError> {
        let decoded = if raw.starts_with('"') {
            decode_sf_string(raw)?
        } else {
            raw.to_owned()
        };
        let visible = decoded.bytes().all(|b| (0x21..=0x7e).contains(&b));
        if visible && (1..=Self::MAX_LEN).contains(&decoded.len()) {
            Ok(Self(decoded))
        } else {
            Err(DomainError::InvalidIdempotencyKey)
        }
    }

    /// Parses raw header bytes (header values need not be UTF-8).
    pub fn parse_bytes(raw: &[u8]) -> Result<Self, DomainError> {
        std::str::from_utf8(raw)
            .map_err(|_| DomainError::InvalidIdempotencyKey)
            .and_then(Self::parse)
    }
}

/// Decodes an RFC 8941 §3.3.3 sf-string: `"` then chars %x20-21 / %x23-5B / %x5D-7E or the
/// escapes `\"` `\\`, then `"` and nothing after it.
fn decode_sf_string(raw: &str) -> Result<String, DomainError> {
    let bytes = raw.as_bytes();
    let mut out = String::with_capacity(bytes.len());
    let mut i = 1; // skip the opening quote
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => {
                let next = *bytes.get(i + 1).ok_or(DomainError::InvalidIdempotencyKey)?;
                if next != b'"' && next != b'\\' {
                    return Err(DomainError::InvalidIdempotencyKey);
                }
                out.push(char::from(next));
                i += 2;
            }
            b'"' => {
                return if i + 1 == bytes.len() {
                    Ok(out)
                } else {
                    Err(DomainError::InvalidIdempotencyKey)
                };
            }
            b @ 0x20..=0x7e => {
                out.push(char::from(b));
                i += 1;
            }
            _ => return Err(DomainError::InvalidIdempotencyKey),
        }
    }
    Err(DomainError::InvalidIdempotencyKey) // no closing quote
}

/// Units of one SKU in one purchase: 1..=100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Quantity(u32);

impl Quantity {
    pub const MAX: u32 = 100;

    pub fn new(n: i64) -> Result<Self, DomainError> {
        match u32::try_from(n) {
            Ok(n) if (1..=Self::MAX).contains(&n) => Ok(Self(n)),
            _ => Err(DomainError::InvalidQuantity),
        }
    }

    /// Accepts only a JSON integer (`1.5`, `1e2`, `"1"` are refused).
    pub fn from_json(v: &serde_json::Value) -> Result<Self, DomainError> {
        match v {
            serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => n
                .as_i64()
                .map_or(Err(DomainError::InvalidQuantity), Self::new),
            _ => Err(DomainError::InvalidQuantity),
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sku_accepts_the_documented_alphabet_only() {
        assert!(Sku::parse("SKU-1.a_b").is_ok());
        assert!(Sku::parse(&"a".repeat(64)).is_ok());
        for bad in ["", "a b", "a/b", "ä", "a:b", &"a".repeat(65)] {
            assert_eq!(Sku::parse(bad), Err(DomainError::InvalidSku), "{bad:?}");
        }
    }

    #[test]
    fn user_accepts_colon_and_at() {
        assert!(UserId::parse("alice@shop:42").is_ok());
        for bad in ["", "a b", "a/b", "a,b", &"u".repeat(65)] {
            assert_eq!(UserId::parse(bad), Err(DomainError::InvalidUser), "{bad:?}");
        }
    }

    #[test]
    fn quantity_is_a_json_integer_in_range() {
        let q = |s: &str| {
            Quantity::from_json(&serde_json::from_str(s).unwrap_or(serde_json::Value::Null))
        };
        assert_eq!(q("1").map(Quantity::get), Ok(1));
        assert_eq!(q("100").map(Quantity::get), Ok(100));
        for bad in [
            "0",
            "-1",
            "101",
            "1.5",
            "1.0",
            "1e2",
            "1e30",
            "\"1\"",
            "null",
            "18446744073709551616",
        ] {
            assert_eq!(q(bad), Err(DomainError::InvalidQuantity), "{bad}");
        }
    }

    #[test]
    fn idempotency_key_bare_and_sf_string_forms_name_the_same_key() {
        assert_eq!(
            IdempotencyKey::parse("abc"),
            IdempotencyKey::parse("\"abc\"")
        );
        assert_eq!(
            IdempotencyKey::parse(r#""a\"b\\c""#).map(|k| k.0),
            Ok(r#"a"b\c"#.to_owned())
        );
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
        for bad in [
            "",
            "\"\"",
            "a b",
            "\"a b\"",
            "\"abc",
            "\"abc\"x",
            "\"a\\nb\"",
            "é",
            "\t",
            &"k".repeat(256),
        ] {
            assert_eq!(
                IdempotencyKey::parse(bad),
                Err(DomainError::InvalidIdempotencyKey),
                "{bad:?}"
            );
        }
        assert!(IdempotencyKey::parse_bytes(&[0xff, 0x41]).is_err());
    }
}
