//! What a challenge is bound to, carried in its ALTCHA salt as `&`-separated parameters exactly as
//! `altcha-lib`'s `createChallenge({params, expires})` writes them
//! (`<random hex>?kid=…&purpose=…&sku=…&user=…&issued=<unix s>&expires=<unix s>&`, form-encoded
//! like `URLSearchParams`, ending with the `&` delimiter; `altcha-lib` 1.x ended it with `;`,
//! which is read too): which key signed it, the purpose, SKU and shopper it is good for, when it
//! was issued (a purchase of a scheduled sale needs a proof issued from its start on: no proof
//! solved before the start buys) and when it expires. The salt is covered by the signature (through the challenge hash), so none of
//! this can be changed without the secret; `super::verify` compares it with the request.

use shared::KeyId;

/// What a proof may be spent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// Joining the sale's waiting room (`POST /v1/queue/{sku}`).
    Join,
    /// A purchase of a sale without a waiting room (`POST /v1/purchases`).
    Purchase,
}

impl Purpose {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Join => "join",
            Self::Purchase => "purchase",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "join" => Some(Self::Join),
            "purchase" => Some(Self::Purchase),
            _ => None,
        }
    }
}

/// The parameters of a salt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Unix seconds after which the challenge is refused (ALTCHA's `expires`).
    pub expires_s: i64,
    /// Unix seconds when the challenge was issued (the edge's clock); absent from challenges made
    /// elsewhere (e.g. by `altcha-lib` with the secret), which then cannot buy from a sale with a
    /// start.
    pub issued_s: Option<i64>,
    /// The `POW_SECRETS` key that signed it.
    pub kid: KeyId,
    pub purpose: Purpose,
    pub sku: String,
    pub user: String,
}

/// Longest salt accepted (ours are under 200 bytes).
pub const MAX_SALT_LEN: usize = 512;

/// `application/x-www-form-urlencoded` like `URLSearchParams` (unreserved bytes as they are).
fn form_encode(value: &str, out: &mut String) {
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'*' | b'-' | b'.' | b'_') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

impl Binding {
    /// The salt: `random_hex` (unique per challenge), then the parameters in `altcha-lib`'s order
    /// (ours, then `expires`), each followed by `&` (the last one is the delimiter).
    pub fn salt(&self, random_hex: &str) -> String {
        let mut salt = format!("{random_hex}?");
        let expires = self.expires_s.to_string();
        let issued = self.issued_s.map(|s| s.to_string());
        let params = [
            Some(("kid", self.kid.as_str())),
            Some(("purpose", self.purpose.as_str())),
            Some(("sku", self.sku.as_str())),
            Some(("user", self.user.as_str())),
            issued.as_deref().map(|issued| ("issued", issued)),
            Some(("expires", expires.as_str())),
        ];
        for (name, value) in params.into_iter().flatten() {
            salt.push_str(name);
            salt.push('=');
            form_encode(value, &mut salt);
            salt.push('&');
        }
        salt
    }

    /// Reads the parameters of `salt`: `None` unless it ends with a delimiter (`&`, or `altcha-lib`
    /// 1.x's `;`: neither can be a digit of the number, so `salt + number` reads one way only) and
    /// names each parameter exactly once (unknown ones are ignored, as ALTCHA's libraries do).
    pub fn parse(salt: &str) -> Option<Self> {
        if salt.len() > MAX_SALT_LEN {
            return None;
        }
        let salt = salt.strip_suffix('&').or_else(|| salt.strip_suffix(';'))?;
        let (_, query) = salt.split_once('?')?;
        let mut expires = None;
        let mut issued = None;
        let mut kid = None;
        let mut purpose = None;
        let mut sku = None;
        let mut user = None;
        for (name, value) in crate::url_parts::form_pairs(query) {
            let slot = match name.as_str() {
                "expires" => &mut expires,
                "issued" => &mut issued,
                "kid" => &mut kid,
                "purpose" => &mut purpose,
                "sku" => &mut sku,
                "user" => &mut user,
                _ => continue,
            };
            if slot.replace(value).is_some() {
                return None;
            }
        }
        let expires_s = expires?.parse::<i64>().ok()?;
        let issued_s = match issued {
            Some(issued) => Some(issued.parse::<i64>().ok()?),
            None => None,
        };
        Some(Self {
            expires_s,
            issued_s,
            kid: KeyId::parse(&kid?)?,
            purpose: Purpose::parse(&purpose?)?,
            sku: sku?,
            user: user?,
        })
    }
}

impl Binding {
    /// The binding as a v2 challenge's `data` (its expiry is the challenge's `expiresAt`).
    pub fn into_data(self) -> super::altcha_v2::Data {
        super::altcha_v2::Data {
            issued: self.issued_s,
            kid: self.kid.as_str().to_owned(),
            purpose: self.purpose.as_str().to_owned(),
            sku: self.sku,
            user: self.user,
        }
    }

    /// The binding of a v2 challenge's `data` and `expiresAt`: `None` unless the key id and the
    /// purpose read.
    pub fn from_data(data: &super::altcha_v2::Data, expires_s: i64) -> Option<Self> {
        Some(Self {
            expires_s,
            issued_s: data.issued,
            kid: KeyId::parse(&data.kid)?,
            purpose: Purpose::parse(&data.purpose)?,
            sku: data.sku.clone(),
            user: data.user.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding() -> Binding {
        Binding {
            expires_s: 1_800_000_000,
            issued_s: Some(1_799_999_880),
            kid: KeyId::default_id(),
            purpose: Purpose::Purchase,
            sku: "SHOE-1".into(),
            user: "alice@shop:42".into(),
        }
    }

    #[test]
    fn the_salt_is_altchas_shape_and_reads_back() {
        let salt = binding().salt("00ff");
        assert_eq!(
            salt,
            "00ff?kid=default&purpose=purchase&sku=SHOE-1&user=alice%40shop%3A42&issued=1799999880&expires=1800000000&"
        );
        assert_eq!(Binding::parse(&salt), Some(binding()));
        // A challenge made elsewhere (altcha-lib with the secret) says nothing of its issue.
        let elsewhere = Binding {
            issued_s: None,
            ..binding()
        };
        assert!(!elsewhere.salt("ab").contains("issued"));
        assert_eq!(Binding::parse(&elsewhere.salt("ab")), Some(elsewhere));
        let join = Binding {
            purpose: Purpose::Join,
            ..binding()
        };
        assert_eq!(Binding::parse(&join.salt("ab")), Some(join));
    }

    #[test]
    fn a_spliced_duplicated_or_incomplete_salt_is_refused() {
        let salt = binding().salt("00ff");
        // Without the closing delimiter, digits of the number could pass for the salt's.
        assert_eq!(Binding::parse(salt.trim_end_matches('&')), None);
        assert_eq!(
            Binding::parse(&format!("{};", salt.trim_end_matches('&'))),
            Some(binding()),
            "altcha-lib 1.x's delimiter"
        );
        for bad in [
            format!("{salt}sku=OTHER&"),
            "00ff?expires=1&kid=default&purpose=purchase&sku=A&".to_owned(),
            "00ff?expires=soon&kid=default&purpose=purchase&sku=A&user=u&".to_owned(),
            "00ff?expires=1&kid=default&purpose=refund&sku=A&user=u&".to_owned(),
            "00ff?expires=1&issued=soon&kid=default&purpose=join&sku=A&user=u&".to_owned(),
            format!("{salt}issued=1&"),
            "00ff?expires=1&kid=no%20spaces&purpose=join&sku=A&user=u&".to_owned(),
            "00ff&".to_owned(),
            format!("{}&", "a".repeat(MAX_SALT_LEN)),
        ] {
            assert_eq!(Binding::parse(&bad), None, "{bad}");
        }
        // Unknown parameters are ignored, like ALTCHA's own `extractParams`.
        assert_eq!(Binding::parse(&format!("{salt}extra=1&")), Some(binding()));
    }

    #[test]
    fn a_binding_reads_back_from_a_v2_challenges_data() {
        let data = binding().into_data();
        assert_eq!(data.purpose, "purchase");
        assert_eq!(Binding::from_data(&data, 1_800_000_000), Some(binding()));
        for bad in [
            super::super::altcha_v2::Data {
                purpose: "refund".into(),
                ..binding().into_data()
            },
            super::super::altcha_v2::Data {
                kid: "no spaces".into(),
                ..binding().into_data()
            },
        ] {
            assert_eq!(Binding::from_data(&bad, 1), None);
        }
    }
}
