//! The little URL handling the edge needs, on the runtime's already-serialized WHATWG URL string:
//! its origin and its query, split by hand (two string searches; the runtime has already parsed
//! and normalized the URL), and the query's `application/x-www-form-urlencoded` pairs decoded by
//! `form_urlencoded` (the WHATWG algorithm, from the `url` crate's authors). Deliberately not the
//! `url` crate itself: its IDNA tables alone would add ~100 KB to the upload.

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

/// Decodes an `application/x-www-form-urlencoded` query into (name, value) pairs: `+` is a
/// space, malformed escapes stay as they are, invalid UTF-8 becomes U+FFFD (such values then
/// fail the SKU check).
pub fn form_pairs(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_bytes())
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .collect()
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
