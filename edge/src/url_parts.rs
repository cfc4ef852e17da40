//! The little URL handling the edge needs, on the runtime's already-serialized WHATWG URL string.
//! (Deliberately not the `url` crate: its IDNA tables alone would add ~100 KB to the upload.)

/// `scheme://host[:port]` of an absolute URL (everything before the path).
pub fn origin(url: &str) -> &str {
    let Some(host_start) = url.find("://").map(|i| i + 3) else {
        return url;
    };
    let end = url[host_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| host_start + i);
    &url[..end]
}

/// The query string of `url`, without `?` and without any fragment.
pub fn query(url: &str) -> &str {
    let without_fragment = url.split_once('#').map_or(url, |(before, _)| before);
    without_fragment.split_once('?').map_or("", |(_, q)| q)
}

/// Decodes an `application/x-www-form-urlencoded` query into (name, value) pairs.
pub fn form_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            (decode(name), decode(value))
        })
        .collect()
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decoding with `+` as space; malformed escapes stay as they are, invalid UTF-8 becomes
/// U+FFFD (such values then fail the SKU check).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hi = bytes.get(i + 1).copied().and_then(hex_value);
                let lo = bytes.get(i + 2).copied().and_then(hex_value);
                if let (Some(hi), Some(lo)) = (hi, lo) {
                    out.push(hi * 16 + lo);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_is_everything_before_the_path() {
        assert_eq!(
            origin("http://127.0.0.1:8787/warmup?sku=A"),
            "http://127.0.0.1:8787"
        );
        assert_eq!(origin("https://edge.example"), "https://edge.example");
        assert_eq!(origin("https://edge.example?x"), "https://edge.example");
        assert_eq!(origin("/relative"), "/relative");
    }

    #[test]
    fn query_pairs_are_decoded() {
        let url = "https://e/warmup?sku=A&sku=B%2D1&x=a+b&empty=&flag&sku=%zz#frag";
        assert_eq!(query(url), "sku=A&sku=B%2D1&x=a+b&empty=&flag&sku=%zz");
        let pairs = form_pairs(query(url));
        let expected = [
            ("sku", "A"),
            ("sku", "B-1"),
            ("x", "a b"),
            ("empty", ""),
            ("flag", ""),
            ("sku", "%zz"),
        ];
        assert_eq!(pairs, expected.map(|(k, v)| (k.to_owned(), v.to_owned())));
        assert_eq!(form_pairs(query("https://e/warmup")), vec![]);
        assert_eq!(
            form_pairs("a=%FF%"),
            vec![("a".to_owned(), "\u{fffd}%".to_owned())]
        );
    }
}
